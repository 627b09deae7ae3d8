"""Writing rendered files without ever losing a user's files or leaving a reader without a repository.

* Only folders tritongen wrote are replaced: each carries a marker file (`.tritongen-rendered`); `--force` on a
  non-empty folder without it is refused.
* A new render goes to a temporary folder beside the destination, then takes its place in one step. Replacing an
  existing folder swaps the two with renameat2(RENAME_EXCHANGE) (Linux >= 3.15, through ctypes): tritonserver,
  which may poll the repository, sees the old tree or the new one, never a missing one. Where the exchange is not
  available (another OS, a filesystem without it) each file is replaced in place with os.replace, which is atomic
  per file, and files the new render no longer has are removed afterwards: the folder never disappears (a reader
  may see a mix of old and new files for a moment, never a missing path). A plain "rename the old folder away,
  rename the new one in" was rejected: the destination is missing between the two renames.
* Temporary folders carry the writer's pid (`.<name>.tritongen-tmp-<pid>-*`); a run first removes those whose
  process is gone, so a render killed with SIGKILL leaves nothing behind after the next run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import re
import shutil
import tempfile
from pathlib import Path, PurePosixPath

from tritongen.errors import SpecError, problem

MARKER = ".tritongen-rendered"
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_TMP = re.compile(r"^\.(?P<name>.+)\.tritongen-(tmp|old)-(?P<pid>\d+)-")


def _check_paths(files: dict[str, bytes]) -> None:
    for rel in files:
        p = PurePosixPath(rel)
        if p.is_absolute() or ".." in p.parts or rel == MARKER:
            raise SpecError(problem("render", f"refusing to write outside the output folder: {rel}",
                                    "this is a tritongen bug; report it"))


def status_lines(files: dict[str, bytes], out_dir: Path) -> list[str]:
    """`create` / `identical` / `overwrite` per file, as copier reports it."""
    lines = []
    for rel, data in files.items():
        target = out_dir / rel
        if not target.is_file():
            state = "create"
        elif target.read_bytes() == data:
            state = "identical"
        else:
            state = "overwrite"
        lines.append(f"{state:>9}  {rel}")
    return lines


def check_output_dir(out_dir: Path, flag: str = "--output") -> Path:
    """The absolute output folder, refused (SpecError naming the flag) when it or a folder above it is a file."""
    out_dir = Path(out_dir).expanduser().absolute()
    for p in (out_dir, *out_dir.parents):
        if p.exists() and not p.is_dir():
            where = "is a file" if p == out_dir else f"is under {p}, which is a file"
            raise SpecError(problem(flag, f"{out_dir} {where}", "choose a folder path"))
    return out_dir.resolve()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(out_dir: Path) -> list[Path]:
    """Remove temporary folders of `out_dir` left by writers that no longer run (killed, crashed)."""
    removed = []
    if not out_dir.parent.is_dir():
        return removed
    for entry in out_dir.parent.iterdir():
        m = _TMP.match(entry.name)
        if m and m["name"] == out_dir.name and int(m["pid"]) != os.getpid() and not _alive(int(m["pid"])):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (renameat2 RENAME_EXCHANGE). False when this system cannot."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError, TypeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _replace_in_place(new: Path, out_dir: Path) -> None:
    """Move every file of `new` over `out_dir` one os.replace at a time, then drop what the render no longer has."""
    keep = set()
    for src in sorted(new.rglob("*")):
        rel = src.relative_to(new)
        keep.add(rel)
        dst = out_dir / rel
        if src.is_dir():
            if dst.exists() and not dst.is_dir():
                dst.unlink()
            dst.mkdir(exist_ok=True)
        else:
            if dst.is_dir():
                shutil.rmtree(dst)
            os.replace(src, dst)
    for old in sorted(out_dir.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if old.relative_to(out_dir) not in keep:
            shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()


def _publish_new(tmp: Path, out_dir: Path, flag: str) -> None:
    """Rename the render into a destination that was missing or empty when checked. A plain rename fails when
    another writer filled it meanwhile (rename never replaces a non-empty folder), so of two concurrent renders
    into one new folder exactly one wins; the other says so instead of replacing it or failing with a traceback."""
    try:
        tmp.rename(out_dir)
    except OSError as err:
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        raise SpecError(problem(flag, f"{out_dir} was written by another render while this one ran",
                                "run one render at a time per folder; pass --force to replace it")) from None


def write_repository(files: dict[str, bytes], out_dir: Path, *, overwrite: bool = False,
                     flag: str = "--output") -> None:
    """Write `files` into `out_dir` in one step (see the module docstring); `overwrite` replaces a folder
    tritongen wrote earlier, never anything else."""
    _check_paths(files)
    out_dir = check_output_dir(out_dir, flag)
    clean_stale(out_dir)
    existed = out_dir.exists() and any(out_dir.iterdir())
    if existed:
        if not (out_dir / MARKER).is_file():
            raise SpecError(problem(flag, f"{out_dir} is not empty and was not written by tritongen (no {MARKER})",
                                    "choose another folder; tritongen replaces only folders it wrote"))
        if not overwrite:
            raise SpecError(problem(flag, f"{out_dir} exists and is not empty",
                                    "pass --force to replace it, or choose another folder"))
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tritongen-tmp-{os.getpid()}-", dir=out_dir.parent))
    except OSError as err:
        raise SpecError(problem(flag, f"cannot write next to {out_dir} ({err.strerror})",
                                "choose a folder you can write to")) from None
    try:
        for rel, data in {**files, MARKER: json.dumps({"written_by": "tritongen"}).encode() + b"\n"}.items():
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        tmp.chmod(0o755)
        if not existed:
            _publish_new(tmp, out_dir, flag)
        elif _exchange(tmp, out_dir):
            pass  # tmp now holds the previous tree; removed below
        else:
            _replace_in_place(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
