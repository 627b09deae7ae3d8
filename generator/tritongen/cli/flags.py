"""What every tritongen command shares: --version, -q / -v, how a server is found without --url, and the head of the
generated spec reference."""

from __future__ import annotations

import argparse
import sys

from tritongen import console

# How generate and loadtest find a server without --url (the help of both says it).
FINDS_SERVER = ("Default: the local `tritongen serve` that serves the spec's deployment, or the one --server names "
                "(each records its endpoints in a state file per server: $TRITONGEN_STATE, else $XDG_RUNTIME_DIR or "
                "/tmp, /tritongen-<uid>/servers/)")


def version() -> str:
    """The installed tritongen's version (the package metadata of pyproject.toml)."""
    # Deferred for the CLI's start: importlib.metadata and its scan of the installed distributions take about 0.1 s,
    # which every `tritongen --help` paid when the parser read the version.
    from importlib.metadata import PackageNotFoundError, version as package_version

    try:
        return package_version("tritongen")
    except PackageNotFoundError:
        return "(not installed: run from a source tree)"


class VersionAction(argparse.Action):
    """`--version`: print tritongen's version and exit; the version is looked up only when the flag is given."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog} {version()}", file=sys.stdout)
        parser.exit()


def add_verbosity_flags(parser: argparse.ArgumentParser, sub: argparse._SubParsersAction) -> None:
    """-q / -v before the command or after it (`tritongen -q render ...`, `tritongen render ... -q`)."""
    def add(target: argparse.ArgumentParser, default: object) -> None:
        group = target.add_mutually_exclusive_group()
        group.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=console.QUIET,
                           default=default, help="print only results and errors (no progress or status lines)")
        group.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=console.VERBOSE,
                           default=default, help="print more detail (plan and validate: every field)")

    add(parser, console.NORMAL)
    for command in sub.choices.values():
        add(command, argparse.SUPPRESS)  # a subcommand's default must not undo a flag given before it


# docs/reference.md is this page (`tritongen validate --markdown > docs/reference.md`; tests/test_docs.py checks it).
REFERENCE_HEAD = """# Spec reference

Every field of the deployment spec (version 1), generated from the field docstrings by
`tritongen validate --markdown`; `tritongen validate --explain` prints the same in a terminal. Sections are in
bold; a field is written `section.field` here and nested in YAML:

    serving:
      kv_cache:
        max_tokens: 4096

"""
