"""``ckb``: the command line of contextual-kb."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from contextual_kb.errors import TransformationError

app = typer.Typer(
    help="Contextual retrieval for Amazon Bedrock Knowledge Bases.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console()
errors = Console(stderr=True)

STRATEGY_HELP = (
    "Context strategy (CONTEXT_STRATEGY): claude, structural or none. With claude and no AWS credentials, "
    "model calls go to the local Bedrock stand-in."
)


@app.command()
def transform(
    event_file: Annotated[Path, typer.Argument(help="A KB custom-transformation event (JSON).", exists=True)],
    objects: Annotated[
        Path | None,
        typer.Option(
            help="Folder of batch objects to upload first, keyed by relative path "
            "[default: objects/ beside the event, when it exists]."
        ),
    ] = None,
    endpoint: Annotated[
        str | None,
        typer.Option(
            envvar="AWS_ENDPOINT_URL_S3",
            help="S3 endpoint to use. Without one, a local S3 (moto) is started on 127.0.0.1.",
        ),
    ] = None,
    strategy: Annotated[str | None, typer.Option(help=STRATEGY_HELP)] = None,
    show: Annotated[int, typer.Option(help="Print this many chunks before and after.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the handler's response as JSON.")] = False,
    logs: Annotated[bool, typer.Option(help="Also print the handler's log lines and metrics.")] = False,
) -> None:
    """Run the real transformation handler on EVENT_FILE and print a summary."""
    if logs:
        os.environ["POWERTOOLS_LOG_LEVEL"] = "INFO"  # before the handler's logger is created
    from contextlib import nullcontext

    import boto3

    from contextual_kb.local import runner, s3server
    from contextual_kb.local.model_endpoint import model_endpoint
    from contextual_kb.local.render import print_chunks, print_summary

    if strategy:
        os.environ["CONTEXT_STRATEGY"] = strategy
    event = runner.load_event(event_file)
    objects_dir = objects or (event_file.parent / "objects")
    if endpoint:
        os.environ["AWS_ENDPOINT_URL_S3"] = endpoint
    uses_model = os.environ.get("CONTEXT_STRATEGY", "claude") == "claude"
    with (
        model_endpoint() if uses_model else nullcontext(),
        nullcontext(endpoint) if endpoint else s3server.local_s3(),
    ):
        if objects_dir.is_dir():
            runner.upload_objects(boto3.client("s3"), str(event.get("bucketName")), objects_dir)
        try:
            result = runner.invoke(event)
        except runner.HandlerError as failed:
            if logs:
                errors.print(failed.log, markup=False, highlight=False)
            kind = (
                "transformation failed"
                if isinstance(failed.error, TransformationError)
                else "handler crashed"
            )
            errors.print(f"[bold red]{kind}:[/] {failed}")
            raise typer.Exit(code=1) from failed
    if logs:
        console.print(result.log, markup=False, highlight=False)
    if as_json:
        console.print_json(json.dumps(result.response))
        return
    print_summary(console, result)
    if show:
        print_chunks(console, result, show)


@app.command()
def demo(
    max_tokens: Annotated[int, typer.Option(help="Fixed-size chunking: tokens per chunk.")] = 120,
    overlap: Annotated[int, typer.Option(help="Fixed-size chunking: overlap percentage.")] = 20,
    chunks_per_batch: Annotated[int, typer.Option(help="Chunks per batch object.")] = 4,
    strategy: Annotated[str, typer.Option(help=STRATEGY_HELP)] = "claude",
    show: Annotated[int, typer.Option(help="Chunks to print before and after.")] = 3,
    documents: Annotated[
        Path, typer.Option(help="Folder of documents to ingest.", exists=True, file_okay=False)
    ] = Path("events/documents"),
    evaluate: Annotated[
        bool, typer.Option("--eval/--no-eval", help="End with retrieval quality, raw vs contextualized.")
    ] = True,
) -> None:
    """Offline demo: local S3, KB-style chunking, the real handler, chunks before and after."""
    from contextlib import nullcontext

    from contextual_kb.local.demo import run_demo
    from contextual_kb.local.model_endpoint import model_endpoint

    os.environ["CONTEXT_STRATEGY"] = strategy
    with model_endpoint() if strategy == "claude" else nullcontext() as endpoint:
        run_demo(
            console,
            documents,
            max_tokens=max_tokens,
            overlap=overlap,
            chunks_per_batch=chunks_per_batch,
            show=show,
            endpoint=endpoint,
        )
    if evaluate:
        _demo_eval()


def _demo_eval() -> None:
    """The codebase benchmark's dev split, offline: BM25 over raw and structurally contextualized chunks."""
    from contextual_kb.eval_cli import DATASET, print_table
    from contextual_kb.local.offline_eval import evaluate, load_corpus, load_queries

    corpus, queries = DATASET / "codebase_chunks.json", DATASET / "evaluation_dev.jsonl"
    if not corpus.exists() or not queries.exists():
        console.print(f"(no labelled set at {DATASET}: skipping the retrieval table)")
        return
    console.rule("[bold]retrieval quality, offline (ckb eval --local)")
    documents, labelled = load_corpus(corpus), load_queries(queries)
    rows = evaluate(
        documents,
        labelled,
        strategies=["none", "structural"],
        analyzers=["opensearch-builtin"],
        ks=[5, 10, 20],
    )
    print_table(console, rows, [5, 10, 20], title=f"codebase benchmark, dev split: {len(labelled)} queries")


from contextual_kb.eval_cli import register as register_eval  # noqa: E402
from contextual_kb.kb_cli import register  # noqa: E402 - the commands that use the deployed stack

register(app)
register_eval(app)


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
