"""``ckb``: the command line of contextual-kb."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

# Before anything imports the runtime: Powertools builds its Tracer at import, and an X-Ray client with it
# (which reads the user's AWS profile); the command line never traces.
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")

import typer
from rich.console import Console

from contextual_kb.cli.datasets import DATASET_HELP
from contextual_kb.cli.errors import CkbGroup, choice
from contextual_kb.cli.paid import YES_HELP, confirm_contexts, corpus_sizes
from contextual_kb.cli.terminal import console, error_console, write_json
from contextual_kb.cli.user_handler import HANDLER_HELP

if TYPE_CHECKING:
    from contextual_kb.local.model_endpoint import ModelEndpoint


def _click_style_arguments() -> None:
    """typer 0.29 writes a required argument as ``{name}`` in the usage line and puts its type beside it
    (``<list[Path]>``); click's convention (``NAME``, ``[NAME]``, ``NAME...``) reads better and matches
    the options' metavars. Help text only: nothing is parsed differently."""
    from typer.core import TyperArgument

    def usage_name(self: TyperArgument) -> str:
        name = self.display_name_raw.upper()
        name = name if self.required else f"[{name}]"
        return name if self.nargs == 1 or name.endswith("...") else f"{name}..."

    TyperArgument._usage_display_name = usage_name  # type: ignore[method-assign]
    TyperArgument.display_type_rich = lambda self, ctx: None  # type: ignore[method-assign]


_click_style_arguments()
app = typer.Typer(
    cls=CkbGroup,
    help="Contextual retrieval for Amazon Bedrock Knowledge Bases.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain help: it reads the same at 80 columns, piped or not (Rich's panels cut defaults and ate brackets).
    rich_markup_mode=None,
)

STRATEGIES = ("claude", "structural", "none")
DEMO_QUESTION = "how does the token bucket refill"  # the demo's documents answer it (token_bucket.py)
STRATEGY_HELP = (
    "Context strategy: claude, structural or none. claude calls the local Bedrock stand-in unless "
    "--bedrock (or ANTHROPIC_BEDROCK_BASE_URL) says otherwise."
)
BEDROCK_HELP = (
    "With claude: call Amazon Bedrock with your AWS credentials (paid) instead of the local stand-in."
)


def _version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version

        typer.echo(f"ckb {version('contextual-kb')}")
        raise typer.Exit()


@app.callback()
def root(
    debug: Annotated[
        bool, typer.Option("--debug", help="On an error, show the traceback too (also: CKB_DEBUG=1).")
    ] = False,
    show_version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", callback=_version, is_eager=True),
    ] = False,
) -> None:
    """Contextual retrieval for Amazon Bedrock Knowledge Bases."""
    CkbGroup.debug = CkbGroup.debug or debug


@app.command()
def transform(
    event_file: Annotated[
        Path,
        typer.Argument(
            help="A KB custom-transformation event (JSON).",
            exists=True,
            dir_okay=False,
            metavar="EVENT_FILE",
        ),
    ],
    objects: Annotated[
        Path | None,
        typer.Option(
            help="Folder of batch objects to upload first, keyed by relative path (default: objects/ beside "
            "the event, when it exists).",
            exists=True,
            file_okay=False,
            metavar="FOLDER",
        ),
    ] = None,
    endpoint: Annotated[
        str | None,
        typer.Option(
            envvar="AWS_ENDPOINT_URL_S3",
            help="S3 endpoint to use. Without one, a local S3 (moto) is started on 127.0.0.1.",
            metavar="URL",
        ),
    ] = None,
    strategy: Annotated[
        str | None,
        typer.Option(
            envvar="CONTEXT_STRATEGY",
            help=STRATEGY_HELP,
            callback=choice(STRATEGIES),
            metavar="NAME",
            show_default="claude",
        ),
    ] = None,
    bedrock: Annotated[bool, typer.Option("--bedrock", help=BEDROCK_HELP)] = False,
    chunking: Annotated[
        str | None,
        typer.Option(
            envvar="CHUNKING",
            help="kb: keep the Knowledge Base's chunks; structure: chunk each document by its own structure "
            "(a data source whose chunking is NONE; sizes from CHUNK_MAX_TOKENS, CHUNK_OVERLAP_TOKENS).",
            callback=choice(("kb", "structure")),
            metavar="NAME",
            show_default="kb",
        ),
    ] = None,
    show: Annotated[
        int, typer.Option(help="Print this many chunks before and after.", min=0, metavar="N")
    ] = 0,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print only the handler's response, as JSON.")
    ] = False,
    logs: Annotated[
        bool, typer.Option(help="Also print the handler's log lines and metrics (JSON lines, on stderr).")
    ] = False,
    allow_fallback: Annotated[
        bool,
        typer.Option(
            "--allow-fallback",
            help="With claude: exit 0 even when no chunk got the model's context (all structural fallbacks).",
        ),
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help=YES_HELP)] = False,
    user_handler: Annotated[
        str | None,
        typer.Option("--handler", help=HANDLER_HELP, metavar="FILE[:NAME]"),
    ] = None,
) -> None:
    """Run the real transformation handler (or yours, --handler) on EVENT_FILE and print a summary."""
    from contextlib import nullcontext

    from contextual_kb.local.environment import offline_aws

    # Offline (no S3 endpoint given) reads nothing of the user's AWS setup (--bedrock keeps credentials),
    # from before the runtime is imported: its tracer builds an X-Ray client, which reads the profile.
    with nullcontext() if endpoint else offline_aws(keep_credentials=bedrock):
        _transform(
            event_file,
            objects,
            endpoint,
            strategy,
            bedrock,
            chunking,
            show,
            as_json,
            logs,
            allow_fallback,
            yes,
            user_handler,
        )


def _transform(
    event_file: Path,
    objects: Path | None,
    endpoint: str | None,
    strategy: str | None,
    bedrock: bool,
    chunking: str | None,
    show: int,
    as_json: bool,
    logs: bool,
    allow_fallback: bool,
    yes: bool,
    user_handler: str | None = None,
) -> None:
    from contextlib import nullcontext

    import boto3

    from contextual_kb.cli.render import STANDIN_CONTEXT, print_chunks, print_summary
    from contextual_kb.cli.user_handler import load_user_handler, print_handler_output, user_handler_failed
    from contextual_kb.local import runner, s3server
    from contextual_kb.local.model_endpoint import ENV, model_endpoint
    from contextual_kb.runtime.models import parse_event

    event = runner.load_event(event_file)
    parse_event(event)  # a malformed event fails here, before any server starts
    yours = load_user_handler(user_handler) if user_handler else None  # before any server starts
    objects_dir = objects or (event_file.parent / "objects")
    os.environ["CONTEXT_STRATEGY"] = strategy = strategy or "claude"
    if chunking:
        os.environ["CHUNKING"] = chunking
    if endpoint:
        os.environ["AWS_ENDPOINT_URL_S3"] = endpoint
    if logs:  # the metrics the function would send to CloudWatch, as EMF lines beside its log
        os.environ["POWERTOOLS_METRICS_DISABLED"] = "false"
    out = console()
    with (
        model_endpoint(bedrock=bedrock) if strategy == "claude" else nullcontext() as model,
        nullcontext(endpoint) if endpoint else s3server.local_s3(),
    ):
        if objects_dir.is_dir():
            runner.upload_objects(boto3.client("s3"), str(event.get("bucketName")), objects_dir)
        if model is not None and model.kind == "Bedrock":
            confirm_contexts(runner.document_sizes(event), yes=yes)
        if model is not None and model.kind == "custom endpoint" and not allow_fallback:
            _check_reachable(os.environ[ENV])
        try:
            result = runner.invoke(event, lambda_handler=yours.function if yours else None)
        except runner.HandlerError as failed:
            if logs:
                sys.stderr.write(failed.log)
            if yours is not None:
                raise user_handler_failed(yours.spec, failed) from failed.error
            raise
    if logs:
        sys.stderr.write(result.log)
    if as_json:
        write_json(result.response)
    else:
        if yours is not None:
            out.print(f"handler: yours, {yours.spec}", markup=False, highlight=False)
        print_summary(out, result)
        if show and yours is not None:
            print_handler_output(out, result, show)
        elif show:
            standin = model is not None and model.kind == "stand-in"
            print_chunks(out, result, show, label=STANDIN_CONTEXT if standin else "context")
    if model is not None:
        _report_model(result.summary(), model, error_console() if as_json else out, allow_fallback)


def _check_reachable(url: str) -> None:
    """A model endpoint nobody listens at fails now, in one line, not after every call's retries."""
    from contextual_kb.cli.errors import CliError
    from contextual_kb.local.model_endpoint import unreachable

    why = unreachable(url)
    if why:
        raise CliError(
            f"cannot reach the model endpoint {url} (ANTHROPIC_BEDROCK_BASE_URL)",
            why,
            "Start it, or unset ANTHROPIC_BEDROCK_BASE_URL for the local stand-in; --allow-fallback runs "
            "anyway with structural contexts",
        )


def _report_model(
    summary: dict[str, object], model: ModelEndpoint, out: Console, allow_fallback: bool
) -> None:
    """Where the model calls went and what fell back; a run in which the model gave no chunk its context
    fails unless the user accepts structural contexts (a dead endpoint must not pass for a good run)."""
    from contextual_kb.cli.errors import CliError
    from contextual_kb.cli.render import model_gave_nothing, model_lines
    from contextual_kb.cli.terminal import plain

    for line in model_lines(summary, model.description, standin=model.kind == "stand-in"):
        out.print(plain(line))
    if model_gave_nothing(summary) and not allow_fallback:
        raise CliError(
            "no chunk got the model's context",
            f"every context is a structural fallback; the calls went to {model.description}",
            "Check that endpoint, your credentials and model access (--logs shows each failure), "
            "or pass --allow-fallback to accept structural contexts",
        )


@app.command()
def demo(
    max_tokens: Annotated[
        int, typer.Option(help="Fixed-size chunking: tokens per chunk.", min=1, metavar="N")
    ] = 120,
    overlap: Annotated[
        int,
        typer.Option(help="Fixed-size chunking: overlap percentage (0-99).", min=0, max=99, metavar="PCT"),
    ] = 20,
    chunks_per_batch: Annotated[int, typer.Option(help="Chunks per batch object.", min=1, metavar="N")] = 4,
    strategy: Annotated[
        str,
        typer.Option(
            envvar="CONTEXT_STRATEGY",
            help=STRATEGY_HELP,
            callback=choice(STRATEGIES),
            metavar="NAME",
        ),
    ] = "claude",
    bedrock: Annotated[bool, typer.Option("--bedrock", help=BEDROCK_HELP)] = False,
    show: Annotated[int, typer.Option(help="Chunks to print before and after.", min=0, metavar="N")] = 3,
    documents: Annotated[
        Path,
        typer.Option(help="Folder of documents to ingest.", exists=True, file_okay=False, metavar="FOLDER"),
    ] = Path("events/documents"),
    evaluate: Annotated[
        bool,
        typer.Option(
            "--eval/--no-eval",
            help="End with retrieval quality on the codebase benchmark: raw, structural, and this strategy.",
        ),
    ] = True,
    dataset: Annotated[
        Path | None,
        typer.Option(help=DATASET_HELP, exists=True, file_okay=False, metavar="FOLDER"),
    ] = None,
    question: Annotated[
        str,
        typer.Option(
            help="End with this query over the documents, through a local Knowledge Base ('' to skip).",
            metavar="TEXT",
        ),
    ] = DEMO_QUESTION,
    yes: Annotated[bool, typer.Option("--yes", help=YES_HELP)] = False,
) -> None:
    """Offline demo: local S3, KB-style chunking, the real handler, chunks before and after; then a local
    Knowledge Base syncs the documents and answers a query."""

    from contextual_kb.local.environment import offline_aws

    os.environ["CONTEXT_STRATEGY"] = strategy
    out = console()
    # The user's AWS setup is not read offline (--bedrock keeps credentials), from before the runtime is
    # imported (its tracer builds an X-Ray client, which reads the profile).
    with offline_aws(keep_credentials=bedrock):
        _demo(
            out,
            documents,
            max_tokens,
            overlap,
            chunks_per_batch,
            show,
            strategy,
            bedrock,
            evaluate,
            dataset,
            yes,
            question,
        )


def _demo(
    out: Console,
    documents: Path,
    max_tokens: int,
    overlap: int,
    chunks_per_batch: int,
    show: int,
    strategy: str,
    bedrock: bool,
    evaluate: bool,
    dataset: Path | None,
    yes: bool,
    question: str = "",
) -> None:
    from contextlib import nullcontext
    from functools import cache

    from contextual_kb.cli.datasets import benchmark_or_none
    from contextual_kb.cli.demo import run_demo
    from contextual_kb.local.model_endpoint import model_endpoint

    labelled = cache(lambda: benchmark_or_none(dataset))  # fetched once, when first needed

    with model_endpoint(bedrock=bedrock) if strategy == "claude" else nullcontext() as endpoint:
        if endpoint is not None and endpoint.kind == "Bedrock":
            from contextual_kb.cli.demo import document_sizes

            sizes = document_sizes(documents, max_tokens=max_tokens, overlap=overlap)
            if evaluate:
                sizes += _benchmark_sizes(labelled())
            confirm_contexts(sizes, yes=yes)
        run_demo(
            out,
            documents,
            max_tokens=max_tokens,
            overlap=overlap,
            chunks_per_batch=chunks_per_batch,
            show=show,
            endpoint=endpoint,
            then=(lambda: _demo_eval(out, strategy, endpoint, labelled())) if evaluate else None,
            question=question or None,
        )


def _benchmark_sizes(benchmark: tuple[Path, Path] | None) -> list[tuple[int, int]]:
    """(tokens, chunks) of the codebase benchmark's documents, when it can be had (the demo's table)."""
    from contextual_kb.evaluation.offline import load_corpus

    return corpus_sizes(load_corpus(benchmark[0])) if benchmark is not None else []


def _demo_eval(out: Console, strategy: str, endpoint: object, benchmark: tuple[Path, Path] | None) -> None:
    """The codebase benchmark's dev split, offline: BM25 over raw chunks, structural contexts, and the demo's
    own strategy."""
    from contextual_kb.cli.datasets import dataset_label
    from contextual_kb.cli.evaluate import print_table
    from contextual_kb.evaluation.offline import evaluate, load_corpus, load_queries

    if benchmark is None:
        out.print("(no codebase benchmark: skipping the retrieval table)")
        return
    corpus, queries = benchmark
    out.rule("retrieval quality, offline (ckb eval --local)")
    documents, labelled = load_corpus(corpus), load_queries(queries)
    rows = evaluate(
        documents,
        labelled,
        strategies=list(dict.fromkeys(["none", "structural", strategy])),
        analyzers=["index"],
        ks=[5, 10, 20],
        endpoint=endpoint,  # type: ignore[arg-type]
    )
    print_table(out, rows, [5, 10, 20], title=f"{dataset_label(corpus)}, dev split: {len(labelled)} queries")


from contextual_kb.cli.agents import register as register_mcp  # noqa: E402
from contextual_kb.cli.contextualize import register as register_contextualize  # noqa: E402
from contextual_kb.cli.evaluate import register as register_eval  # noqa: E402
from contextual_kb.cli.kb import register  # noqa: E402 - the commands that use the deployed stack
from contextual_kb.cli.local import register as register_local  # noqa: E402

register(app)
register_eval(app)
register_contextualize(app)
register_local(app)
register_mcp(app)


def main() -> None:
    import warnings

    # Local runs only: with metrics disabled, Powertools warns about each invocation's dimension.
    warnings.filterwarnings("ignore", message="Dimension 'Strategy' has already been added")
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")  # no EMF blobs on a terminal
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    app()


if __name__ == "__main__":
    main()
