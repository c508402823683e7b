"""``ckb local``: a whole deployment on 127.0.0.1 (``local/stack.py``) until Ctrl-C, for ``ckb upload``,
``sync``, ``query``, ``ask``, ``doctor``, ``eval --stack`` and ``ckb mcp`` run in another shell with the
variables it prints."""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from contextual_kb.cli.errors import choice
from contextual_kb.cli.terminal import console, error_console

if TYPE_CHECKING:
    from contextual_kb.local.user_handler import UserHandler

STRATEGIES = ("claude", "structural", "none")


@contextmanager
def running_stack(
    *, max_tokens: int = 300, overlap: int = 20, dense: bool = False, handler: UserHandler | None = None
) -> Iterator[object]:
    """The local stack with the deployed index's analysis (and MiniLM vectors with ``dense``); its ingestion
    runs ``handler`` (a user's) instead of ours when one is given."""
    from contextual_kb.evaluation.lexical import ANALYZERS
    from contextual_kb.local.stack import local_stack

    embed = None
    if dense:
        from contextual_kb.cli.errors import usage
        from contextual_kb.cli.extras import install_command
        from contextual_kb.evaluation.dense import DenseUnavailableError, MiniLm

        try:  # the model loads when MiniLm is made: a dense extra that fails to import is said now
            embed = MiniLm().embed
            embed(["a probe, so a missing dense extra is said now"])
        except DenseUnavailableError as exc:
            raise usage("--dense", f"{exc}: install it with {install_command(['dense'])}") from None
    hook = {} if handler is None else {"invoke": invoking(handler)}
    with local_stack(
        analyzer=ANALYZERS["index"], embed=embed, max_tokens=max_tokens, overlap_percentage=overlap, **hook
    ) as stack:
        yield stack


def invoking(handler: UserHandler) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The local Knowledge Base's transformation step with the user's handler in place of ours (the only
    change: the stack, its ingestion and its runtime are the same)."""
    from contextual_kb.local import runner

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        # On the job's thread: standard output stays the main thread's, as for ours (stack._invoke).
        return runner.invoke(event, capture_stdout=False, lambda_handler=handler.function).response

    return invoke


def local(
    strategy: Annotated[
        str,
        typer.Option(
            envvar="CONTEXT_STRATEGY",
            help="The transformation's context strategy (claude calls the local Bedrock stand-in).",
            callback=choice(STRATEGIES),
            metavar="NAME",
        ),
    ] = "claude",
    max_tokens: Annotated[
        int, typer.Option(help="The data source's fixed-size chunking: tokens per chunk.", min=1, metavar="N")
    ] = 300,
    overlap: Annotated[
        int, typer.Option(help="Fixed-size chunking: overlap percentage.", min=0, max=99, metavar="PCT")
    ] = 20,
    dense: Annotated[
        bool,
        typer.Option(
            "--dense", help="Vectors too (MiniLM, the dense extra): SEMANTIC search, and HYBRID fuses both."
        ),
    ] = False,
    until_stdin_closes: Annotated[
        bool, typer.Option("--until-stdin-closes", help="Stop when standard input closes (a parent's pipe).")
    ] = False,
    user_handler: Annotated[
        str | None,
        typer.Option(
            "--handler",
            help="Ingestion runs your own handler (contextual_kb.runtime.sdk, docs/SDK.md) instead of ours: "
            "the function NAME (default handler) of the Python FILE.",
            metavar="FILE[:NAME]",
        ),
    ] = None,
) -> None:
    """A local Knowledge Base and stack on 127.0.0.1 (local S3, the Bedrock stand-in, ingestion that runs the
    real handler), until Ctrl-C: prints the variables that point ckb, boto3 and ckb mcp at it."""
    from contextual_kb.cli.user_handler import load_user_handler

    yours = load_user_handler(user_handler) if user_handler else None  # before anything starts
    os.environ["CONTEXT_STRATEGY"] = strategy
    started = time.perf_counter()
    with running_stack(max_tokens=max_tokens, overlap=overlap, dense=dense, handler=yours) as stack:
        out = console()
        environment = stack.environment()  # type: ignore[attr-defined]
        for name, value in environment.items():
            out.print(f"export {name}={shlex.quote(value)}", markup=False, highlight=False)
        sys.stdout.flush()
        _quiet_stdout()
        handler_note = f"; ingestion runs your handler {yours.spec}" if yours else ""
        error_console().print(
            f"local stack {environment['CKB_STACK']} ready in {time.perf_counter() - started:.1f} s "
            f"(strategy {strategy}{handler_note}); in another shell, set the variables above, then: ckb "
            "upload DOCS; ckb sync; ckb query TEXT. Its Rerank is a deterministic stand-in (BM25 among the "
            "candidates), not a model, and ckb ask's answers are the Bedrock stand-in's, made by rule. "
            "Ctrl-C stops it (and forgets everything)."
        )
        try:
            if until_stdin_closes:
                sys.stdin.read()  # returns at EOF: the parent closed the pipe or died
            else:
                while True:
                    time.sleep(3600)
        except KeyboardInterrupt:
            pass


def _quiet_stdout() -> None:
    """Standard output holds the export lines alone (``ckb local > env.sh``): what the handler prints after
    them on the jobs' threads goes elsewhere. Powertools prints its ColdStart metric even with metrics
    disabled (``single_metric`` does not check POWERTOOLS_METRICS_DISABLED): dropped then; on stderr when
    metrics are asked for."""
    asked = os.environ.get("POWERTOOLS_METRICS_DISABLED", "true").lower() in {"0", "false", "no"}
    sys.stdout = sys.stderr if asked else open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - for good


def register(app: typer.Typer) -> None:
    app.command(name="local")(local)
