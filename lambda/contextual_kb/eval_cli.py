"""``ckb eval``: retrieval quality on a labelled set, offline (``--local``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from contextual_kb.evaluation import RRF_K, Difference
from contextual_kb.kb_cli import _fail
from contextual_kb.local.offline_eval import Row, versus_raw

console = Console()
DATASET = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "codebase"


def eval_command(
    queries: Annotated[Path, typer.Option(help="Labelled queries (JSONL).", exists=True)] = DATASET
    / "evaluation_dev.jsonl",
    corpus: Annotated[Path, typer.Option(help="The corpus, pre-chunked (JSON).", exists=True)] = DATASET
    / "codebase_chunks.json",
    k: Annotated[str, typer.Option("--k", help="Cut-offs, comma-separated.")] = "5,10,20",
    local: Annotated[bool, typer.Option("--local", help="Offline: the real handler, BM25 here.")] = False,
    strategies: Annotated[str, typer.Option(help="none (raw), structural, claude; comma-separated.")] = (
        "none,structural"
    ),
    analyzers: Annotated[
        str, typer.Option(help="opensearch-builtin (the deployed index's), code-aware, plain.")
    ] = "opensearch-builtin,code-aware",
    retrieval: Annotated[
        str,
        typer.Option(
            help="Offline: bm25, dense, hybrid (RRF of the two); comma-separated. dense/hybrid need the "
            "dense extra (torch)."
        ),
    ] = "bm25",
    rrf_k: Annotated[int, typer.Option(help="Offline hybrid: the RRF constant.", min=1)] = RRF_K,
    as_json: Annotated[bool, typer.Option("--json", help="Print the table as JSON.")] = False,
    stack: Annotated[
        str, typer.Option(envvar="CKB_STACK", help="Deployed: the stack's name.")
    ] = "ContextualKb",
    region: Annotated[str | None, typer.Option(help="Deployed: AWS region [default: AWS_REGION].")] = None,
    state: Annotated[Path, typer.Option(help="Deployed: results kept here, so a rerun resumes.")] = Path(
        ".ckb-eval-state.jsonl"
    ),
    skip_sync: Annotated[
        bool, typer.Option("--skip-sync", help="Deployed: the KB is already synced.")
    ] = False,
) -> None:
    """Pass@k (as Anthropic's guide defines it), Recall@k and MRR of each configuration, side by side:
    offline with --local, else against the deployed Knowledge Base (upload, sync, query, score)."""
    from contextual_kb.local.dense import DenseUnavailableError
    from contextual_kb.local.offline_eval import evaluate, load_corpus, load_queries

    try:
        cutoffs = sorted({int(part) for part in k.split(",") if part.strip()})
        if not cutoffs or cutoffs[0] < 1:
            raise ValueError(f"--k {k!r}: expected positive cut-offs, comma-separated, such as 5,10,20")
        documents, labelled = load_corpus(corpus), load_queries(queries)
    except ValueError as exc:
        raise _fail(str(exc), code=2) from None
    if not local:
        rows = _deployed(documents, labelled, cutoffs, stack, region, state, skip_sync)
    else:
        try:
            rows = evaluate(
                documents,
                labelled,
                strategies=[s.strip() for s in strategies.split(",") if s.strip()],
                analyzers=[a.strip() for a in analyzers.split(",") if a.strip()],
                ks=cutoffs,
                retrievals=[r.strip() for r in retrieval.split(",") if r.strip()],
                rrf_k=rrf_k,
            )
        except (ValueError, DenseUnavailableError) as exc:
            raise _fail(str(exc), code=2) from None
    if as_json:
        gains = versus_raw(rows, compared_cutoff(cutoffs))
        listed = [
            row.as_dict() | ({"vs_raw": gain.as_dict()} if gain else {})
            for row, gain in zip(rows, gains, strict=True)
        ]
        console.print_json(json.dumps(listed))
        return
    print_table(console, rows, cutoffs, title=f"{len(labelled)} queries, {len(documents)} documents")


_SHOWN = {
    "bm25 opensearch-builtin": "bm25 index",
    "hybrid opensearch-builtin+minilm": "hybrid index+minilm",
}


def compared_cutoff(cutoffs: list[int]) -> int:
    """The cut-off at which configurations are compared with raw chunks: the middle one (10 of 5,10,20; the
    upper of two)."""
    return cutoffs[len(cutoffs) // 2]


def print_table(out: Console, rows: list[Row], cutoffs: list[int], *, title: str) -> None:
    caption = "P@k Pass@k, R@k Recall@k (golden chunks pooled), MRR; x100. index: the deployed index's BM25"
    table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD)
    table.add_column("chunks", no_wrap=True)
    table.add_column("retrieval", no_wrap=True)
    deepest = cutoffs[-1]  # Recall at the deepest cut-off only, so the table fits a terminal (--json: all)
    for name in (*(f"P@{k}" for k in cutoffs), f"R@{deepest}", "MRR"):
        table.add_column(name, justify="right", no_wrap=True, min_width=5)
    for row in rows:
        s = row.scores
        table.add_row(
            row.chunks,
            _SHOWN.get(row.retrieval, row.retrieval),
            *(f"{s.pass_at[k]:.2f}" for k in cutoffs),
            f"{s.recall_at[deepest]:.2f}",
            f"{s.mrr:.2f}",
        )
    out.print(table)
    # Below the table: a column would not fit 80 characters.
    compared = compared_cutoff(cutoffs)
    gains = [(row, gain) for row, gain in zip(rows, versus_raw(rows, compared), strict=True) if gain]
    if not gains:
        return
    out.print(
        f"P@{compared} gain over raw chunks [95% interval], queries up/down (sign-test p):",
        markup=False,
        highlight=False,
    )
    labels = [f"{row.chunks}, {_SHOWN.get(row.retrieval, row.retrieval)}" for row, _ in gains]
    width = max(map(len, labels))
    for label, (_, gain) in zip(labels, gains, strict=True):
        out.print(f"  {label:<{width}}  {_gain(gain)}", markup=False, highlight=False)


def _gain(gain: Difference) -> str:
    interval = (
        "" if gain.margin is None else f"[{gain.points - gain.margin:+.2f}, {gain.points + gain.margin:+.2f}]"
    )
    return f"{gain.points:+6.2f} {interval:<16}  {gain.better} up, {gain.worse} down (p {gain.p_value:.2g})"


def _deployed(
    documents: list[dict],
    labelled: list[dict],
    cutoffs: list[int],
    stack: str,
    region: str | None,
    state: Path,
    skip_sync: bool,
) -> list[Row]:
    """Upload the corpus, sync, query every question with and without reranking, score."""
    from botocore.exceptions import BotoCoreError, ClientError

    from contextual_kb import aws_clients
    from contextual_kb.deployed_eval import run_queries, score_deployed, upload_corpus
    from contextual_kb.ingestion import IngestionError
    from contextual_kb.kb_cli import _deployment, _ingestion, _retriever
    from contextual_kb.retrieval import DEFAULT_RERANKER, RetrievalError

    deployment = _deployment(stack, region)
    s3 = aws_clients.client("s3", deployment.region)
    try:
        uploaded = upload_corpus(s3, deployment.source_bucket, documents)
    except (ClientError, BotoCoreError) as exc:
        raise _fail(f"cannot upload the corpus to s3://{deployment.source_bucket}: {exc}") from None
    console.print(f"{uploaded} of {len(documents)} document(s) uploaded (the rest were there already)")
    if not skip_sync:
        ingestion = _ingestion(deployment)
        try:
            states = list(ingestion.follow(ingestion.start()))
            job = states[-1]
        except IngestionError as exc:
            raise _fail(str(exc)) from None
        if job.status != "COMPLETE":
            raise _fail(f"ingestion job {job.job_id} ended {job.status}: {'; '.join(job.failure_reasons)}")
    rows = []
    for reranker in (DEFAULT_RERANKER, "none"):
        retriever = _retriever(deployment, reranker, False, "hybrid")
        label = f"{deployment.knowledge_base_id}|{retriever.search_type}|{reranker}"
        try:
            retrieved = run_queries(retriever, labelled, max(cutoffs), state, label)
        except RetrievalError as exc:
            raise _fail(str(exc)) from None
        name = f"{retriever.search_type.lower()} + {'no rerank' if reranker == 'none' else 'rerank'}"
        rows.append(Row("deployed KB", name, score_deployed(documents, labelled, retrieved, cutoffs)))
    return rows


def register(app: typer.Typer) -> None:
    app.command(name="eval")(eval_command)
