"""``ckb eval``: retrieval quality on a labelled set, offline (``--local``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from contextual_kb.cli.datasets import DATASET_HELP, SHOWN_DATASET, benchmark
from contextual_kb.cli.errors import CliError, choice, usage
from contextual_kb.cli.extras import install_command
from contextual_kb.cli.paid import YES_HELP, confirm, confirm_contexts, corpus_sizes
from contextual_kb.cli.terminal import console, error_console, status_line, write_json
from contextual_kb.evaluation.metrics import RRF_K, Difference
from contextual_kb.evaluation.offline import Row, versus_raw

if TYPE_CHECKING:
    from contextual_kb.query.deployment import Deployment

STRATEGY_NAMES = ("none", "structural", "claude")
ENGINES = ("python", "lucene")


def names(option: str, value: str, allowed: Sequence[str], kind: str) -> list[str]:
    """A comma-separated option's names, each checked: a usage error naming the option otherwise. Pure."""
    given = [part.strip() for part in value.split(",") if part.strip()]
    unknown = [name for name in given if name not in allowed]
    if unknown or not given:
        what = f"unknown {kind} {', '.join(map(repr, unknown))}" if unknown else f"no {kind} given"
        raise usage(option, what, f"Choose from {', '.join(allowed)}, comma-separated")
    return list(dict.fromkeys(given))


def cutoffs_of(value: str) -> list[int]:
    """``--k``: positive cut-offs, comma-separated, sorted. Pure."""
    try:
        found = sorted({int(part) for part in value.split(",") if part.strip()})
    except ValueError:
        found = []
    if not found or found[0] < 1:
        raise usage("--k", f"{value!r}: expected positive cut-offs, comma-separated, such as 5,10,20")
    return found


# Options one path applies and the other cannot: given to the other, refused, never silently ignored.
OFFLINE_ONLY = (
    "strategies",
    "analyzers",
    "retrieval",
    "engine",
    "rrf_k",
    "bedrock",
    "chunkers",
    "chunk_tokens",
    "chunk_overlap",
)
DEPLOYED_ONLY = ("stack", "region", "state", "skip_sync")


def _refuse_the_other_paths_options(ctx: typer.Context, local: bool) -> None:
    """One line naming every option the chosen path would ignore: against a stack, the stack's function
    decides the contexts and its index the analysis and the search; offline, there is no stack. An option
    counts as given when it is on the command line (``CKB_STACK``, which ``ckb local`` exports, does not)."""
    wrong = DEPLOYED_ONLY if local else OFFLINE_ONLY
    given = [
        next(p.opts[0] for p in ctx.command.params if p.name == name)
        for name in wrong
        # By name: typer carries its own copy of click, whose enum is not click's.
        if getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"
    ]
    if not given:
        return
    if local:
        raise usage(", ".join(given), "against a deployed stack only, not with --local", "Drop them")
    raise usage(
        ", ".join(given),
        "offline only (ckb eval --local); against a stack, its function decides the contexts and its index "
        "the analysis and the search",
        "Add --local, or drop them",
    )


def eval_command(
    ctx: typer.Context,
    queries: Annotated[
        Path | None,
        typer.Option(
            help="Labelled queries (JSONL).",
            exists=True,
            dir_okay=False,
            metavar="FILE",
            show_default=f"{SHOWN_DATASET}: its dev split",
        ),
    ] = None,
    corpus: Annotated[
        Path | None,
        typer.Option(
            help="The corpus, pre-chunked (JSON).",
            exists=True,
            dir_okay=False,
            metavar="FILE",
            show_default=SHOWN_DATASET,
        ),
    ] = None,
    dataset: Annotated[
        Path | None,
        typer.Option(help=DATASET_HELP, exists=True, file_okay=False, metavar="FOLDER"),
    ] = None,
    k: Annotated[str, typer.Option("--k", help="Cut-offs, comma-separated.", metavar="K,K")] = "5,10,20",
    local: Annotated[bool, typer.Option("--local", help="Offline: the real handler, BM25 here.")] = False,
    strategies: Annotated[
        str, typer.Option(help="none (raw), structural, claude; comma-separated.", metavar="NAMES")
    ] = "none,structural",
    analyzers: Annotated[
        str,
        typer.Option(
            help="index (the deployed index's analysis), code-aware, opensearch-builtin (built-in names "
            "only), plain; comma-separated.",
            metavar="NAMES",
        ),
    ] = "index,code-aware",
    retrieval: Annotated[
        str,
        typer.Option(
            help="Offline: bm25, dense, hybrid (RRF of the two); comma-separated. dense/hybrid need the "
            "dense extra (torch).",
            metavar="NAMES",
        ),
    ] = "bm25",
    engine: Annotated[
        str,
        typer.Option(
            help="Offline BM25: python (bm25s), or lucene to add Lucene's BM25 with the deployed analysis "
            "(OpenSearch's k1=1.2, b=0.75) beside it; lucene needs Java and `make lucene`.",
            callback=choice(ENGINES),
            metavar="NAME",
        ),
    ] = "python",
    rrf_k: Annotated[int, typer.Option(help="Offline hybrid: the RRF constant.", min=1, metavar="N")] = RRF_K,
    bedrock: Annotated[
        bool,
        typer.Option(
            "--bedrock",
            help="Offline, with claude: call Amazon Bedrock with your AWS credentials (paid) instead of the "
            "local stand-in.",
        ),
    ] = False,
    chunkers: Annotated[
        str | None,
        typer.Option(
            help="Offline: compare chunkers instead (fixed: the KB's fixed-size with 20% overlap; structure: "
            "ours) on whole documents, by how much of each golden chunk the top k cover, at the same average "
            "chunk length; comma-separated.",
            metavar="NAMES",
        ),
    ] = None,
    chunk_tokens: Annotated[
        int,
        typer.Option(help="With --chunkers: our chunks' CHUNK_MAX_TOKENS.", min=20, max=8192, metavar="N"),
    ] = 300,
    chunk_overlap: Annotated[
        int, typer.Option(help="With --chunkers: our CHUNK_OVERLAP_TOKENS.", min=0, max=4096, metavar="N")
    ] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print only the rows, as JSON.")] = False,
    yes: Annotated[bool, typer.Option("--yes", help=YES_HELP)] = False,
    stack: Annotated[
        str, typer.Option(envvar="CKB_STACK", help="Deployed: the stack's name.", metavar="NAME")
    ] = "ContextualKb",
    region: Annotated[
        str | None, typer.Option(help="Deployed: AWS region.", show_default="AWS_REGION", metavar="REGION")
    ] = None,
    state: Annotated[
        Path, typer.Option(help="Deployed: results kept here, so a rerun resumes.", metavar="FILE")
    ] = Path(".ckb-eval-state.jsonl"),
    skip_sync: Annotated[
        bool, typer.Option("--skip-sync", help="Deployed: the KB is already synced.")
    ] = False,
) -> None:
    """Pass@k (as Anthropic's guide defines it), Recall@k and MRR of each configuration, side by side:
    offline with --local, else against the deployed Knowledge Base (upload, sync, query, score)."""
    from contextual_kb.evaluation.dense import DenseUnavailableError
    from contextual_kb.evaluation.lexical import ANALYZERS
    from contextual_kb.evaluation.offline import RETRIEVALS, evaluate, load_corpus, load_queries

    _refuse_the_other_paths_options(ctx, local)
    cutoffs = cutoffs_of(k)
    chosen = names("--strategies", strategies, STRATEGY_NAMES, "strategy")
    chosen_analyzers = names("--analyzers", analyzers, list(ANALYZERS), "analyzer")
    retrievals = names("--retrieval", retrieval, RETRIEVALS, "retrieval")
    if engine == "lucene" and (not local or chunkers is not None or retrievals != ["bm25"]):
        raise usage("--engine", "lucene runs offline BM25 only", "Use it with --local and --retrieval bm25")
    if engine == "lucene" and bedrock:  # its rows run the strategies again: Bedrock would bill twice
        raise usage("--engine", "lucene with --bedrock would pay for every context twice", "Drop one of them")
    if engine == "lucene":  # before the Python rows' work, not after it
        from contextual_kb.evaluation.lucene import LuceneUnavailableError, version

        try:
            version()
        except LuceneUnavailableError as exc:
            raise usage("--engine", str(exc)) from None
    # The files given are read first: a mistake in one is said before the benchmark is fetched for the other.
    documents = load_corpus(corpus) if corpus is not None else None
    labelled = load_queries(queries) if queries is not None else None
    if documents is None or labelled is None:
        default_corpus, default_queries = benchmark(dataset)
        documents = documents if documents is not None else load_corpus(default_corpus)
        labelled = labelled if labelled is not None else load_queries(default_queries)
    if chunkers is not None:
        _compare_chunkers(
            documents,
            labelled,
            chunkers,
            chunk_tokens,
            chunk_overlap,
            chosen_analyzers,
            cutoffs,
            local,
            as_json,
        )
        return
    notes: list[str] = []
    if not local:
        rows, notes = _deployed(documents, labelled, cutoffs, stack, region, state, skip_sync, yes, as_json)
    else:
        from contextual_kb.local.environment import offline_aws

        if bedrock and "claude" in chosen:
            confirm_contexts(corpus_sizes(documents), yes=yes)
        try:
            with (
                offline_aws(keep_credentials=bedrock),  # the user's AWS setup is not read offline
                status_line("evaluating") as progress,
            ):
                rows = evaluate(
                    documents,
                    labelled,
                    strategies=chosen,
                    analyzers=chosen_analyzers,
                    ks=cutoffs,
                    retrievals=retrievals,
                    rrf_k=rrf_k,
                    bedrock=bedrock,
                    progress=progress,
                )
            if engine == "lucene":
                rows = _with_lucene(rows, documents, labelled, chosen, cutoffs, bedrock)
        except DenseUnavailableError as exc:
            raise usage("--retrieval", f"{exc}: install it with {install_command(['dense'])}") from None
    if as_json:
        gains = versus_raw(rows, compared_cutoff(cutoffs))
        write_json(
            [
                row.as_dict() | ({"vs_raw": gain.as_dict()} if gain else {})
                for row, gain in zip(rows, gains, strict=True)
            ]
        )
        for note in notes:  # what the figures measure: said, never in the JSON a script reads
            error_console().print(note, markup=False, highlight=False)
        return
    out = console()
    print_table(out, rows, cutoffs, title=f"{len(labelled)} queries, {len(documents)} documents")
    for note in notes:
        out.print(note, markup=False, highlight=False)


def _with_lucene(
    rows: list[Row],
    documents: list[dict],
    labelled: list[dict],
    strategies: list[str],
    cutoffs: list[int],
    bedrock: bool,
) -> list[Row]:
    """Each strategy's Lucene row placed after its Python rows."""
    from contextual_kb.evaluation.lucene import LuceneUnavailableError, evaluate_lucene

    try:
        engine_rows = evaluate_lucene(documents, labelled, strategies=strategies, ks=cutoffs, bedrock=bedrock)
    except LuceneUnavailableError as exc:
        raise usage("--engine", str(exc)) from None
    merged = list(rows)
    for extra in engine_rows:
        at = max((i for i, row in enumerate(merged) if row.chunks == extra.chunks), default=len(merged) - 1)
        merged.insert(at + 1, extra)
    return merged


def _compare_chunkers(
    documents: list[dict],
    labelled: list[dict],
    chunkers: str,
    chunk_tokens: int,
    chunk_overlap: int,
    analyzers: list[str],
    cutoffs: list[int],
    local: bool,
    as_json: bool,
) -> None:
    from contextual_kb.evaluation.chunkers import CHUNKERS, compare_chunkers, versus_fixed

    chosen = names("--chunkers", chunkers, CHUNKERS, "chunker")
    if not local:
        raise usage("--chunkers", "chunkers are compared offline only", "Add --local")
    if chunk_overlap > chunk_tokens // 2:
        raise usage("--chunk-overlap", f"{chunk_overlap} is more than half of --chunk-tokens {chunk_tokens}")
    from contextual_kb.local.environment import offline_aws

    with offline_aws():
        rows = compare_chunkers(
            documents,
            labelled,
            chunkers=chosen,
            max_tokens=chunk_tokens,
            overlap_tokens=chunk_overlap,
            analyzers=analyzers,
            ks=cutoffs,
        )
    compared = compared_cutoff(cutoffs)
    gains = versus_fixed(rows, compared)
    if as_json:
        write_json(
            [
                row.as_dict() | ({"vs_fixed": gain.as_dict()} if gain else {})
                for row, gain in zip(rows, gains, strict=True)
            ]
        )
        return
    out = console()
    table = Table(
        title=f"{len(labelled)} queries, {len(documents)} documents, each chunked whole",
        caption="Cov@k: the share of each golden chunk's text that the top k cover (x100, averaged over "
        "queries); Half@k: queries covered at least half",
        box=box.SIMPLE_HEAD,
    )
    for name in ("chunker", "chunks", "chars", "retrieval"):
        table.add_column(name, no_wrap=True, justify="left" if name in {"chunker", "retrieval"} else "right")
    for name in (*(f"Cov@{k}" for k in cutoffs), f"Half@{compared}"):
        table.add_column(name, justify="right", no_wrap=True)
    for row in rows:
        table.add_row(
            row.chunker,
            str(row.chunks),
            f"{row.average_chars:.0f}" + ("" if row.matched else "!"),
            _SHOWN.get(row.retrieval, row.retrieval).removeprefix("bm25 "),
            *(f"{row.scores.coverage_at[k]:.2f}" for k in cutoffs),
            f"{row.scores.half_at[compared]:.2f}",
        )
    out.print(table)
    for chunker, setting in dict((row.chunker, row.setting) for row in rows).items():
        out.print(
            f"{chunker}: {setting}; BM25 over structural contexts + chunks", markup=False, highlight=False
        )
    if not all(row.matched for row in rows):
        out.print("!: average length more than 10% from ours: not a like-for-like comparison", markup=False)
    shown = [(row, gain) for row, gain in zip(rows, gains, strict=True) if gain]
    if shown:
        out.print(
            f"Cov@{compared}, ours minus fixed-size [95% interval], queries up/down (sign-test p):",
            markup=False,
        )
        labels = [_SHOWN.get(row.retrieval, row.retrieval).removeprefix("bm25 ") for row, _ in shown]
        _print_gains(out, labels, [gain for _, gain in shown])


_SHOWN = {
    "bm25 opensearch-builtin": "bm25 builtin",
    "hybrid opensearch-builtin+minilm": "hybrid builtin+minilm",
}


def compared_cutoff(cutoffs: list[int]) -> int:
    """The cut-off at which configurations are compared with raw chunks: the middle one (10 of 5,10,20; the
    upper of two)."""
    return cutoffs[len(cutoffs) // 2]


def print_table(out: Console, rows: list[Row], cutoffs: list[int], *, title: str) -> None:
    # One space between columns, none at the edges: seven columns fit 80 with their figures whole.
    table = Table(
        title=title, caption=legend(rows), box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False
    )
    table.add_column("chunks", no_wrap=True)
    table.add_column("retrieval", no_wrap=True)
    deepest = cutoffs[-1]  # Recall at the deepest cut-off only, so the table fits a terminal (--json: all)
    for name in (*(f"P@{k}" for k in cutoffs), f"R@{deepest}", "MRR"):
        table.add_column(name, justify="right", no_wrap=True, min_width=6)  # "100.00" whole
    for row in rows:
        s = row.scores
        table.add_row(
            row_label(row),
            _SHOWN.get(row.retrieval, row.retrieval),
            *(f"{s.pass_at[k]:.2f}" for k in cutoffs),
            f"{s.recall_at[deepest]:.2f}",
            f"{s.mrr:.2f}",
        )
    out.print(table)
    for note in model_notes(rows):
        out.print(note, markup=False, highlight=False)
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
    labels = [f"{row_label(row)}, {_SHOWN.get(row.retrieval, row.retrieval)}" for row, _ in gains]
    _print_gains(out, labels, [gain for _, gain in gains])


# What each name in the retrieval column means, said under the table only when a row shows it.
_LEGEND = (
    ("index", "index: BM25 with the deployed index's analysis"),
    ("(lucene)", "(lucene): Lucene's BM25 with that analysis"),
    ("code-aware", "code-aware: BM25 splitting identifiers"),
    ("builtin", "builtin: with built-in analyzer names only"),
    ("minilm", "minilm: MiniLM vectors, hybrid their RRF with BM25"),
    ("rerank", "hybrid: the Knowledge Base's search; rerank: its Rerank of the top candidates"),
)


def legend(rows: Sequence[Row]) -> str:
    """The table's caption: the metrics, then what the retrieval names shown mean (none other). Pure."""
    shown = " ".join(_SHOWN.get(row.retrieval, row.retrieval) for row in rows)
    said = [text for word, text in _LEGEND if word in shown]
    if any(row.chunks != "deployed KB" for row in rows):  # the deployed rows' own note says theirs
        said.insert(0, "offline rows: the corpus's own chunks, a golden chunk found by its exact text")
    metrics = "P@k Pass@k, R@k Recall@k (golden chunks pooled), MRR; x100."
    return f"{metrics} {'; '.join(said)}" if said else metrics


def row_label(row: Row) -> str:
    """The chunks column: a model-backed row says where its contexts came from, and never passes structural
    fallbacks off as the model's."""
    if row.model is None:
        return row.chunks
    if row.model.mostly_fallback:
        return f"{row.chunks} (fell back)"
    return f"{row.chunks} ({row.model.endpoint})"


def model_notes(rows: Sequence[Row]) -> list[str]:
    """One note per model-backed strategy: its calls, its fallbacks, and what its contexts are."""
    notes: dict[str, str] = {}
    for row in rows:
        use = row.model
        if use is None or row.chunks in notes:
            continue
        fell = ", ".join(f"{reason} {count:,}" for reason, count in sorted(use.fallbacks.items()))
        note = (
            f"{row.chunks}: {use.calls:,} model calls to {_ENDPOINTS.get(use.endpoint, use.endpoint)}; "
            f"{use.fell_back:,} of {use.chunks:,} chunks fell back to the structural context"
            + (f" ({fell})" if fell else "")
        )
        if use.mostly_fallback:
            note += ": these rows measure structural contexts, not the model's"
        elif use.endpoint == "stand-in":
            note += (
                ". This row measures the plumbing, not Claude: the stand-in's contexts are made by rule "
                "(the document's first line, the chunk's first words), so they add little a search can use "
                "and may score at or below raw chunks. Claude's contexts are what Anthropic measured (35% "
                "fewer top-20 failures with contextual embeddings, 49% with contextual BM25 too): --bedrock "
                "measures them here (paid)"
            )
        notes[row.chunks] = note
    return list(notes.values())


_ENDPOINTS = {
    "stand-in": "the local Bedrock stand-in",
    "custom endpoint": "ANTHROPIC_BEDROCK_BASE_URL",
    "Bedrock": "Amazon Bedrock",
}


def _interval(gain: Difference) -> str:
    if gain.margin is None:
        return ""
    return f"[{gain.points - gain.margin:+.2f}, {gain.points + gain.margin:+.2f}]"


def _print_gains(out: Console, labels: list[str], gains: list[Difference]) -> None:
    """One line a gain, its label and figures in columns as wide as the longest of each; when the longest
    line would not fit the terminal, each label on a line of its own with its figures under it, so no
    line wraps in the middle of its figures."""
    points = [f"{gain.points:+.2f}" for gain in gains]
    intervals = [_interval(gain) for gain in gains]
    tails = [f"{gain.better} up, {gain.worse} down (p {gain.p_value:.2g})" for gain in gains]
    wide, across = max(map(len, points)), max(map(len, intervals))
    figures = [
        " ".join([f"{point:>{wide}}", *([f"{interval:<{across}}"] if across else []), tail])
        for point, interval, tail in zip(points, intervals, tails, strict=True)
    ]
    width = max(map(len, labels))
    if 2 + width + 2 + max(map(len, figures)) <= out.width:
        for label, figure in zip(labels, figures, strict=True):
            out.print(f"  {label:<{width}}  {figure}", markup=False, highlight=False)
        return
    for label, figure in zip(labels, figures, strict=True):
        out.print(f"  {label}", markup=False, highlight=False)
        out.print(f"      {figure}", markup=False, highlight=False)


def _deployed(
    documents: list[dict],
    labelled: list[dict],
    cutoffs: list[int],
    stack: str,
    region: str | None,
    state: Path,
    skip_sync: bool,
    yes: bool,
    as_json: bool,
) -> tuple[list[Row], list[str]]:
    """Upload the corpus, sync, query every question with and without reranking, score; the rows, and the
    notes that say what they measured. Every line for a person goes to stderr with ``as_json``."""
    from contextual_kb.cli.kb import deployment_of, ingestion_of, retriever_of
    from contextual_kb.evaluation.deployed import corpus_digest, run_queries, score_deployed, upload_corpus
    from contextual_kb.query import aws_clients
    from contextual_kb.query.retrieval import DEFAULT_RERANKER

    out = error_console() if as_json else console()
    deployment = deployment_of(stack, region)
    retrievals = f"{2 * len(labelled):,} retrievals ({len(labelled):,} queries, with and without reranking)"
    if skip_sync:
        confirm(f"{retrievals} on {deployment.stack}", "priced by your region's rerank model", yes=yes)
    else:
        confirm_contexts(
            corpus_sizes(documents),
            yes=yes,
            also=f"the embeddings of the corpus and {retrievals} on {deployment.stack}, priced by your "
            "region's embedding and rerank models (contexts the stack remembers are not paid again)",
        )
    s3 = aws_clients.client("s3", deployment.region)
    with status_line(f"uploading {len(documents):,} document(s)"):
        uploaded = upload_corpus(s3, deployment.source_bucket, documents)
    out.print(uploaded_line(uploaded, len(documents)), markup=False, highlight=False)
    if not skip_sync:
        ingestion = ingestion_of(deployment)
        with status_line("ingestion: starting") as progress:
            # Fresh when something was uploaded: a job already running may have scanned before the upload.
            started = ingestion.start(fresh=uploaded > 0, notify=lambda text: out.print(f"note: {text}"))
            for job in ingestion.follow(started):
                progress(f"ingestion job {job.job_id}: {job.status}")
        if job.status != "COMPLETE":
            raise CliError(
                f"ingestion job {job.job_id} ended {job.status}",
                "; ".join(job.failure_reasons) or "no reason given",
                "ckb sync shows the documents that failed",
            )
    # What would change the results keys them: the KB and the search, the corpus, the function's settings.
    corpus = corpus_digest(documents)
    settings = _function_settings(deployment)
    errors = error_console()

    said: list[int] = []

    def bad_lines(numbers: list[int]) -> None:  # each reranker's read finds the same lines: said once
        if said:
            return
        said.extend(numbers)
        shown = ", ".join(map(str, numbers[:10])) + (", ..." if len(numbers) > 10 else "")
        errors.print(
            f"note: {len(numbers):,} line(s) of {state} skipped (cut off, or not a state entry: line(s) "
            f"{shown}); their queries are asked again",
            markup=False,
        )

    rows = []
    for reranker in (DEFAULT_RERANKER, "none"):
        retriever = retriever_of(deployment, reranker, False, "hybrid")
        label = (
            f"{deployment.knowledge_base_id}|{retriever.search_type}|{reranker}|corpus {corpus}|{settings}"
        )
        with status_line(f"{deployment.knowledge_base_id}: querying") as progress:
            retrieved = run_queries(
                retriever, labelled, max(cutoffs), state, label, progress=progress, bad_lines=bad_lines
            )
        name = f"{retriever.search_type.lower()} + {'no rerank' if reranker == 'none' else 'rerank'}"
        rows.append(Row("deployed KB", name, score_deployed(documents, labelled, retrieved, cutoffs)))
    return rows, deployed_notes(_chunking_of(deployment), local_stack=_is_local(deployment))


def uploaded_line(uploaded: int, total: int) -> str:
    """What the upload did, in words that hold for every count. Pure."""
    if uploaded == total:
        return f"{total:,} document(s) uploaded"
    there = total - uploaded
    return f"{uploaded:,} of {total:,} document(s) uploaded ({there:,} already there with the same content)"


def deployed_notes(chunking: str, *, local_stack: bool) -> list[str]:
    """What the deployed rows measure, so they are not compared with the offline ones unawares. Pure."""
    notes = [
        f"deployed KB: the Knowledge Base's own chunks ({chunking}), each with the context its function "
        "gave it; a golden chunk of the benchmark counts as found in a retrieved chunk that holds at least "
        "half of its word 5-grams (a short one whole), so one larger chunk may hold several golden chunks. "
        "ckb eval --local scores the benchmark's own chunks by exact text: the two figures are comparable "
        "only for a corpus chunked as the data source chunks it (docs/BENCHMARKS.md, side by side)",
    ]
    if local_stack:
        notes.append(
            "ckb local: its HYBRID search is BM25 alone over the index's analysis (RRF with MiniLM vectors "
            "only when started with --dense), its contexts the Bedrock stand-in's (made by rule), its "
            "rerank a stand-in (BM25 among the candidates): these rows measure the plumbing, not Titan, "
            "Claude or Cohere"
        )
    return notes


def _chunking_of(deployment: Deployment) -> str:
    """The data source's chunking in a few words, read from GetDataSource; said as unknown when it cannot be
    read (the rows stand without it)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from contextual_kb.cli.kb import ingestion_of
    from contextual_kb.query.ingestion import IngestionError

    try:
        source = ingestion_of(deployment).data_source()
    except (ClientError, BotoCoreError, IngestionError):
        return "its data source's chunking, not read"
    chunking = (source.get("vectorIngestionConfiguration") or {}).get("chunkingConfiguration") or {}
    strategy = chunking.get("chunkingStrategy")
    fixed = chunking.get("fixedSizeChunkingConfiguration") or {}
    if strategy == "FIXED_SIZE" and fixed:
        return f"fixed-size, {fixed.get('maxTokens')} tokens, {fixed.get('overlapPercentage')}% overlap"
    if strategy is None:
        return "the default chunking, fixed-size of about 300 tokens"
    if strategy == "NONE":
        return "no chunking: each file one chunk, or ours with CHUNKING=structure"
    return f"{strategy.lower()} chunking"


def _is_local(deployment: Deployment) -> bool:
    """The Knowledge Base answers on this machine: ``ckb local``'s (the only one a client reaches there)."""
    from urllib.parse import urlparse

    from contextual_kb.query import aws_clients

    endpoint = aws_clients.client("bedrock-agent-runtime", deployment.region).meta.endpoint_url
    return urlparse(endpoint).hostname in {"127.0.0.1", "localhost", "::1"}


def _function_settings(deployment: Deployment) -> str:
    """The transformation's strategy and a digest of its settings (its environment), for the state file's
    key; when they cannot be read, said once, and the key holds the corpus and the search only."""
    import hashlib
    import json

    from botocore.exceptions import BotoCoreError, ClientError

    from contextual_kb.query import aws_clients

    why = "the stack names no function"
    if deployment.function_name:
        try:
            configuration = aws_clients.client("lambda", deployment.region).get_function_configuration(
                FunctionName=deployment.function_name
            )
        except (ClientError, BotoCoreError) as exc:
            why = f"GetFunctionConfiguration failed: {exc}"
        else:
            environment = (configuration.get("Environment") or {}).get("Variables") or {}
            digest = hashlib.sha256(json.dumps(environment, sort_keys=True).encode("utf-8")).hexdigest()[:16]
            return f"strategy {environment.get('CONTEXT_STRATEGY') or 'default'} settings {digest}"
    error_console().print(
        f"note: the function's settings are not known ({why}): results kept in the state file are told "
        "apart by Knowledge Base, search and corpus only; delete it after changing the strategy",
        markup=False,
    )
    return "settings unknown"


def register(app: typer.Typer) -> None:
    app.command(name="eval")(eval_command)
