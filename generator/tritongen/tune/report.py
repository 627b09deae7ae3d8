"""What a tune leaves behind: the trials table (CSV and console), the Pareto plot, the top configurations, the
winning spec next to the input (a new file, never over one) and a readable account of what changed and why."""

from __future__ import annotations

import csv
import difflib
import io
import json
from pathlib import Path
from typing import Any

import yaml

from tritongen.runtimes.base import Knob
from tritongen.spec import Spec
from tritongen.tune.space import apply, current
from tritongen.tune.study import sure

# matplotlib (about 1.4 s of CPU to import) is imported where the plot is drawn.

COLUMNS = ("goodput", "goodput_low", "goodput_high", "completed", "good_tokens_per_s", "ttft_p95_ms", "itl_p95_ms", "errors", "refused", "tokens_equal",
           "feasible", "host_limited", "state", "note")


def _short(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def write_table(table: list[dict[str, Any]], knobs: list[Knob], out: Path) -> Path:
    path = out / "trials.csv"
    fields = ["trial", *[k.path for k in knobs], *COLUMNS]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for row in table:
            w.writerow(row)
    return path


def console_table(table: list[dict[str, Any]], knobs: list[Knob], best: int | None) -> str:
    def fmt(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)

    heads = ["trial", *[_short(k.path) for k in knobs], "goodput", "95% interval", "n", "tok/s", "TTFT p95", "ITL p95", "err", "refused",
             "tokens", "SLO", "host", "state"]
    lines = [[("*" if r["trial"] == best else "") + str(r["trial"]), *[fmt(r.get(k.path)) for k in knobs],
              fmt(r["goodput"]), "-" if r["goodput_low"] is None else f"{r['goodput_low']:.3g}..{r['goodput_high']:.3g}",
              fmt(r["completed"]), fmt(r["good_tokens_per_s"]), fmt(r["ttft_p95_ms"]), fmt(r["itl_p95_ms"]),
              fmt(r["errors"]), fmt(r["refused"]), {True: "equal", False: "DIFFER", None: "-"}[r["tokens_equal"]],
              "met" if r["feasible"] else "missed", "LOADED" if r.get("host_limited") else "ok", r["state"]]
             for r in table]
    widths = [max(len(h), *(len(x[i]) for x in lines)) if lines else len(h) for i, h in enumerate(heads)]
    render = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([render(heads), *(render(x) for x in lines)])


def pareto_plot(table: list[dict[str, Any]], spec: Spec, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    slo = spec.validation.slo
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, limit, label in ((axes[0], "ttft_p95_ms", slo.ttft_p95_ms, "p95 TTFT (ms)"),
                                  (axes[1], "itl_p95_ms", slo.itl_p95_ms, "p95 ITL (ms)")):
        pts = [(r[key], r["goodput"], r["feasible"]) for r in table if r[key] is not None]
        for ok, color, name in ((True, "tab:green", "SLO met"), (False, "tab:red", "SLO missed")):
            xs = [p[0] for p in pts if p[2] == ok]
            ys = [p[1] for p in pts if p[2] == ok]
            ax.scatter(xs, ys, c=color, label=name, alpha=0.8)
        front, best = [], -1.0
        for x, y, _ in sorted(pts, key=lambda p: (p[0], -p[1])):  # lower latency and more goodput
            if y > best:
                front.append((x, y))
                best = y
        if front:
            ax.plot(*zip(*front), "k--", lw=1, label="Pareto front")
        if limit is not None:
            ax.axvline(limit, color="tab:orange", lw=1.5, label=f"SLO {limit:g} ms")
        ax.set_xlabel(label)
        ax.set_ylabel("goodput (req/s per GPU)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"tritongen tune: {spec.name} ({len(table)} trials)")
    fig.tight_layout()
    path = out / "pareto.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def top(table: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The n best trials that met the SLO, by the goodput they are sure of (study.sure)."""
    ok = sorted((r for r in table if r["feasible"] and r["state"] == "complete"), key=sure, reverse=True)
    return [{k: v for k, v in r.items() if k != "good_bins"} for r in ok[:n]]


def _free_name(spec_path: Path) -> Path:
    """<stem>.tuned.yaml next to the input, or .tuned-2, -3, ... when taken: never an existing file."""
    candidate = spec_path.with_name(f"{spec_path.stem}.tuned.yaml")
    n = 2
    while candidate.exists():
        candidate = spec_path.with_name(f"{spec_path.stem}.tuned-{n}.yaml")
        n += 1
    return candidate


def tuned_text(spec_path: Path, data: dict, values: dict[str, Any], before: dict[str, Any]) -> str:
    """The input file with the changed knobs edited in place (ruamel.yaml round trip: its comments, key order, quoting
    and flow-style maps kept where nothing changed); the whole mapping dumped anew only when the file spells a knob
    by an older name the edit cannot reach."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    from tritongen.spec import current_names

    rt = YAML()
    rt.preserve_quotes = True
    rt.width = 4096  # never re-wrap a line the tune did not touch
    doc = rt.load(spec_path.read_text())
    changed = {p: v for p, v in values.items() if v is not None and before.get(p) != v}
    for path, value in changed.items():
        node = doc
        *parents, leaf = path.split(".")
        for part in parents:
            if part not in node or not isinstance(node[part], dict):
                node[part] = CommentedMap()
            node = node[part]
        node[leaf] = value
    buf = io.StringIO()
    rt.dump(doc, buf)
    text = buf.getvalue()
    if current_names(yaml.safe_load(text), str(spec_path)) == apply(data, changed):
        return text
    return yaml.safe_dump(apply(data, changed), sort_keys=False)


def write_winner(spec_path: Path, data: dict, spec: Spec, knobs: list[Knob], best: dict[str, Any], why: str,
                 values: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """The winning spec next to the input and `changes.md` in OUT: each changed field, what it trades, and the
    measured effect against the input spec's own settings (`why`); then the diff."""
    before = current(spec, knobs)
    target = _free_name(spec_path)
    header = (f"# Written by `tritongen tune` from {spec_path.name}: trial {best['trial']}, goodput "
              f"{best['goodput']:.4g} req/s per GPU under validation.slo (see {out}/changes.md).\n")
    body = tuned_text(spec_path, data, values, before)
    with open(target, "x") as f:  # "x": a file that appeared meanwhile is not overwritten either
        f.write(header + body)
    lines = [f"# {target.name}: what `tritongen tune` changed in {spec_path.name}", ""]
    for k in knobs:
        old, new = before.get(k.path), values.get(k.path)
        if old != new:
            lines.append(f"- `{k.path}`: {old if old is not None else 'unset (runtime default)'} -> {new} "
                         f"({k.why})")
    lines += ["", f"Why: {why}."]
    diff = difflib.unified_diff(spec_path.read_text().splitlines(keepends=True), body.splitlines(keepends=True),
                                fromfile=spec_path.name, tofile=target.name)
    lines += ["", "```diff", "".join(diff).rstrip("\n"), "```", ""]
    changes = out / "changes.md"
    changes.write_text("\n".join(lines))
    return target, changes


def write_stays(spec_path: Path, why: str, out: Path) -> Path:
    """`changes.md` when no trial beat the input with confidence: nothing is written next to the input."""
    changes = out / "changes.md"
    changes.write_text(f"# `tritongen tune` left {spec_path.name} as it is\n\nWhy: {why}.\n")
    return changes


def write_top(rows: list[dict[str, Any]], out: Path) -> Path:
    path = out / "top.json"
    path.write_text(json.dumps(rows, indent=2) + "\n")
    return path
