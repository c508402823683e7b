"""The ``ckb`` console script: the cli extra (typer, rich) is checked before anything imports it, so a plain
or ``[cdk]`` install answers in one line naming the extra, not a traceback. Its own module, so that nothing
of the command line imports back the entry that imports it."""

from __future__ import annotations

import sys

from contextual_kb.cli.extras import USAGE_EXIT, line, missing


def main() -> None:
    absent = missing(["cli"])
    if absent:
        sys.stderr.write(f"error: {line('ckb', ['cli'], absent)}\n")
        raise SystemExit(USAGE_EXIT)
    from contextual_kb.cli.main import main as run

    run()
