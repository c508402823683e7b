"""``ckb upload``, ``ckb sync``, ``ckb query``, ``ckb ask``: using the deployed Knowledge Base."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
from rich.table import Table
from rich.text import Text

from contextual_kb.cli import failures
from contextual_kb.cli.errors import CliError, choice, usage
from contextual_kb.cli.paid import YES_HELP
from contextual_kb.cli.terminal import console, error_console, plain, plain_line, write_json
from contextual_kb.query import aws_clients
from contextual_kb.query.answering import MODEL_ACCESS_TODO
from contextual_kb.query.deployment import DEFAULT_STACK, Deployment
from contextual_kb.query.ingestion import WAIT_SECONDS, Ingestion, Job
from contextual_kb.query.retrieval import DEFAULT_RERANKER, RERANKERS, Result, Retriever

Stack = Annotated[str, typer.Option(envvar="CKB_STACK", help="The deployed stack's name.", metavar="NAME")]
Region = Annotated[str | None, typer.Option(help="AWS region.", show_default="AWS_REGION", metavar="REGION")]


def deployment_of(stack: str, region: str | None) -> Deployment:
    where = aws_clients.region(region)
    return Deployment.from_stack(stack, where, aws_clients.client("cloudformation", where))


def upload(
    paths: Annotated[
        list[Path],
        typer.Argument(help="Files or folders (recursively) to upload.", exists=True, metavar="PATH"),
    ],
    prefix: Annotated[
        str, typer.Option(help="Folder in the source bucket (a trailing / is added).", metavar="PREFIX")
    ] = "",
    include_hidden: Annotated[
        bool,
        typer.Option(
            "--include-hidden",
            help="Also upload hidden files and folders (.env, .git/) and version-control folders found in "
            "the folders given.",
        ),
    ] = False,
    follow_links: Annotated[
        bool,
        typer.Option(
            "--follow-links",
            help="Follow links out of the folders given, and links to folders.",
        ),
    ] = False,
    include_ignored: Annotated[
        bool,
        typer.Option(
            "--include-ignored",
            help="Also upload what a .gitignore in the folders ignores, and byte-code and build outputs "
            "(__pycache__, *.pyc, build/, dist/, *.egg-info, node_modules).",
        ),
    ] = False,
    stack: Stack = DEFAULT_STACK,
    region: Region = None,
) -> None:
    """Upload documents to the Knowledge Base's source bucket, with progress; files already there with the
    same content are not uploaded again. Hidden files, version-control folders, what .gitignore ignores,
    build outputs and links out of the folders given are skipped unless asked for."""
    from contextual_kb.query import uploads

    # A prefix names a folder: --prefix docs puts a.md at docs/a.md, not docsa.md.
    prefix = prefix if not prefix or prefix.endswith("/") else f"{prefix}/"
    try:  # every refusal before any upload, and before the stack is looked up
        found = uploads.plan(
            paths,
            prefix,
            include_hidden=include_hidden,
            follow_links=follow_links,
            include_ignored=include_ignored,
        )
    except uploads.UploadError as exc:
        raise CliError("nothing uploaded", str(exc)) from None
    errors = error_console()
    _notes(errors, "skipped:", "yellow", found.skipped)
    if not found.files:
        raise CliError(
            "nothing to upload",
            "the paths given hold no files to upload" + (" (see skipped: above)" if found.skipped else ""),
        )
    deployment = deployment_of(stack, region)
    if not deployment.source_bucket:
        raise CliError(
            f"data source {deployment.data_source_id} has no S3 bucket",
            "it is not an S3 data source",
            "add documents through its own source (the web site, Confluence, SharePoint, ...), then ckb sync",
        )
    bucket = deployment.source_bucket
    s3 = aws_clients.client("s3", deployment.region)
    _notes(errors, "warning:", "yellow", uploads.refusals(found, lambda key: _exists(s3, bucket, key)))
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    out = console()
    sent, same = 0, 0
    # A terminal only: elsewhere a transient bar still ends in a blank line before the summary.
    with Progress(*columns, console=out, transient=True, disable=not out.is_terminal) as progress:
        task = progress.add_task(f"uploading {len(found.files)} file(s)", total=found.total_bytes)
        for file in found.files:
            md5, sha256 = uploads.digests(file.path)
            if uploads.unchanged(s3, bucket, file, md5, sha256):
                same += 1
                progress.advance(task, file.size)
                continue
            try:
                s3.upload_file(
                    str(file.path),
                    bucket,
                    file.key,
                    ExtraArgs={"Metadata": {uploads.CHECKSUM_METADATA: sha256}},
                    Callback=lambda n: progress.advance(task, n),
                )
            except S3UploadFailedError as exc:  # the transfer manager's own wrapper: say which file
                raise CliError(
                    f"{uploads.shown(file.path)}: cannot upload to s3://{bucket}/{uploads.shown(file.key)}",
                    str(exc),
                ) from exc
            sent += 1
    size = sum(f.size for f in found.files)
    summary = f"uploaded {sent} file(s) to s3://{bucket}/{prefix}" + (
        f"; {same} already there with the same content, not uploaded again" if same else ""
    )
    out.print(
        plain_line(f"{summary} ({len(found.files)} file(s), {size:,} bytes); run `ckb sync` to ingest them")
    )


def _notes(errors: Console, label: str, style: str, notes: list[tuple[str, str]], most: int = 20) -> None:
    """One line per note (path, why), the first ``most`` of them, then how many more."""
    for path, why in notes[:most]:
        errors.print(Text.assemble((label, style), " ", plain_line(f"{path}: {why}")))
    if len(notes) > most:
        more = len(notes) - most
        noun = label.rstrip(":")
        noun = f"{noun}s" if more != 1 and noun == "warning" else noun  # "skipped" is its own plural
        errors.print(f"... and {more:,} more {noun}", markup=False)


def _exists(s3: Any, bucket: str, key: str) -> bool:
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError:
        return False
    return True


def sync(
    interval: Annotated[
        float, typer.Option(help="Seconds between status checks.", min=0, metavar="SECONDS")
    ] = 5.0,
    reprocess: Annotated[
        bool,
        typer.Option(
            "--reprocess",
            help="Ingest again documents already ingested, so they go through the transformation (S3 data "
            "sources: each document's .metadata.json gets ckb_reprocessed; docs/ATTACH.md). Paid: asks "
            "first.",
        ),
    ] = False,
    prefix: Annotated[
        str,
        typer.Option(help="With --reprocess: only the documents under this key prefix.", metavar="PREFIX"),
    ] = "",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="With --reprocess: count the documents, change nothing.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help=f"With --reprocess: {YES_HELP}")] = False,
    max_wait: Annotated[
        float,
        typer.Option(
            help="Seconds to wait for another ingestion job in the way (AWS runs one at a time per data "
            "source and per Knowledge Base, five per account) before exiting 1 saying what to run.",
            min=0,
            metavar="SECONDS",
        ),
    ] = WAIT_SECONDS,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the job's status, statistics and every failed document as JSON (notes on stderr).",
        ),
    ] = False,
    stack: Stack = DEFAULT_STACK,
    region: Region = None,
) -> None:
    """Start an ingestion job (or follow the one already running) until it ends; report what failed, grouped
    by reason. Ctrl-C stops following, not the job."""
    if (prefix or dry_run or yes) and not reprocess:
        raise usage(
            "--prefix" if prefix else "--dry-run" if dry_run else "--yes", "applies only with --reprocess"
        )
    deployment = deployment_of(stack, region)
    ingestion = ingestion_of(deployment)
    out = error_console() if as_json else console()  # --json: stdout holds the JSON alone
    marked = _reprocess(deployment, ingestion, prefix, dry_run, yes) if reprocess else None
    if reprocess and marked is None:
        return
    # After marking, a job already running may have scanned before the marks: ours starts after it. Another
    # job in the way (this Knowledge Base's, the account's five) is waited for; IngestionError past max_wait.
    try:
        job = ingestion.start(
            fresh=reprocess,
            wait_seconds=max_wait,
            interval=max(interval, 1.0),
            notify=lambda line: out.print(line, markup=False),
        )
    except KeyboardInterrupt:  # waiting for a job in the way, or while asking AWS to start ours
        error_console().print(
            "stopped: a job AWS had started by then goes on in AWS (Ctrl-C does not stop it); `ckb sync` "
            "follows it, or starts one",
            markup=False,
        )
        raise typer.Exit(code=130) from None
    if job.joined:
        out.print(f"ingestion job {job.job_id} is already {job.status}: following it, not starting another")
        if job.started_at is not None:
            out.print(
                f"documents changed after it started ({job.started_at}) may not be in it: "
                "run ckb sync again when it ends",
                markup=False,
            )
    else:
        out.print(f"started ingestion job {job.job_id}")
    try:
        with out.status("ingesting…") as status:
            for state in ingestion.follow(job, interval=interval):
                job = state
                status.update(_progress_line(job.status, job.statistics))
    except KeyboardInterrupt:
        error_console().print(
            f"stopped following: ingestion job {job.job_id} goes on in AWS (Ctrl-C does not stop it); "
            "`ckb sync` follows it again and reports it",
            markup=False,
        )
        raise typer.Exit(code=130) from None
    failed = ingestion.failed_documents() if job.statistics.get("numberOfDocumentsFailed") else []
    errors = error_console()
    if as_json:
        write_json(
            {
                "jobId": job.job_id,
                "status": job.status,
                "statistics": job.statistics,
                "failureReasons": list(job.failure_reasons),
                "failedDocuments": [{"uri": d.uri, "reason": d.reason} for d in failed],
            }
        )
    else:
        table = Table(title=f"Ingestion job {job.job_id}: {job.status}")
        table.add_column("statistic")
        table.add_column("count", justify="right")
        for name, value in sorted(job.statistics.items()):
            table.add_row(name, str(value))
        out.print(table)
    for reason in job.failure_reasons:
        errors.print(Text.assemble(("job failure:", "red"), " ", plain_line(reason)))
    # By reason, a few documents each: every one of them is in --json. Each name on the line as one line,
    # whatever its key holds (a newline in a key would forge a line).
    groups = failures.grouped(failed)
    for head, names in failures.lines(groups) if not as_json else []:
        errors.print(Text.assemble(("failed:", "red"), " ", plain_line(head)))
        for name in names:
            errors.print(Text.assemble("    ", plain_line(name)))
    if marked is not None and (marked.skipped or marked.archived):
        errors.print(
            f"not reprocessed: {len(marked.archived) + len(marked.skipped):,} document(s) "
            f"({len(marked.archived):,} archived, {len(marked.skipped):,} whose metadata file cannot be "
            "marked; listed above)"
        )
    if (failed or job.status == "FAILED") and deployment.ingestion_log_group:
        errors.print(plain(_reasons_query(deployment.ingestion_log_group, job.job_id)))
    # Doctor checks the stack, not the documents: suggested for a failed job, the model's contexts missing,
    # or a failure doctor's checks cover (not an unreadable file).
    checked = [g.reason for g in groups if failures.doctor_helps(g.reason)]
    if job.status == "FAILED" or checked or _many_fallbacks(deployment, job):
        errors.print("run `ckb doctor` to check the stack's setup: model access, quotas, the transformation")
    if job.status != "COMPLETE" or failed:
        raise typer.Exit(code=1)


def _reasons_query(log_group: str, job_id: str) -> str:
    """The line that ends the failure lines: the Logs Insights query of the job's failed documents."""
    from contextual_kb.query.ingestion_logs import failed_documents_query

    return (
        f"each failed document's reason, in CloudWatch Logs Insights on {log_group}: "
        f"{failed_documents_query(job_id)}"
    )


@dataclass(frozen=True)
class _Reprocessed:
    """What --reprocess left out, reported again once the job has ended."""

    archived: list[tuple[str, str]]
    skipped: list[tuple[str, str]]


def _reprocess(
    deployment: Deployment, ingestion: Ingestion, prefix: str, dry_run: bool, yes: bool
) -> _Reprocessed | None:
    """Mark the documents for the next job to ingest again; None when no job is to be started (a dry run).
    Refused in one line, with no job, when S3 refused any document (its job would leave them out unsaid)."""
    from datetime import UTC, datetime

    from contextual_kb.cli.paid import confirm
    from contextual_kb.query import reprocess

    running = ingestion.running()
    if running is not None:
        raise CliError(
            f"ingestion job {running.job_id} is {running.status}",
            "documents marked now may be missed by it",
            "wait for it (ckb sync follows it), then run ckb sync --reprocess",
        )
    s3 = aws_clients.client("s3", deployment.region)
    try:
        reprocess.check_store(ingestion.knowledge_base(), deployment.metadata_columns)
        plan = reprocess.plan(s3, ingestion.data_source(), prefix)
    except reprocess.UnsupportedError as exc:
        raise CliError(str(exc)) from None
    out = console()
    errors = error_console()
    where = ", ".join(f"s3://{plan.bucket}/{p}" for p in plan.prefixes) or f"s3://{plan.bucket}/"
    for key, storage_class in plan.archived[:20]:
        errors.print(
            Text.assemble(
                ("archived, not marked:", "yellow"),
                " ",
                plain_line(f"s3://{plan.bucket}/{key} ({storage_class}): it cannot be read until restored"),
            )
        )
    if len(plan.archived) > 20:
        errors.print(f"... and {len(plan.archived) - 20:,} more archived")
    if not plan.documents:
        raise CliError(
            f"no documents under {where}",
            f"nothing to reprocess but {len(plan.archived):,} archived"
            if plan.archived
            else "nothing to reprocess",
        )
    low, high = plan.estimated_usd()
    estimate = (
        f"about ${low:,.2f}-${high:,.2f} for their contexts if they are plain text (grouped-per-chunk, Haiku "
        "4.5 list prices; contexts remembered from an earlier run cost nothing), plus the embedding model's "
        "tokens for every chunk (docs/ATTACH.md, What reprocessing costs)"
    )
    out.print(
        f"{len(plan.documents):,} document(s), {plan.total_bytes:,} bytes, under {where}"
        + (f" ({len(plan.archived):,} archived left out)" if plan.archived else "")
    )
    if dry_run:
        out.print(f"dry run: nothing changed. Ingesting them again costs {estimate}", markup=False)
        return None
    confirm(
        f"ingesting {len(plan.documents):,} document(s) again through the transformation and the embedding "
        "model",
        estimate,
        yes=yes,
    )
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    bar = (TextColumn("{task.description}"), BarColumn())
    with Progress(*bar, console=out, transient=True, disable=not out.is_terminal) as progress:
        task = progress.add_task("marking", total=len(plan.documents))
        marked = reprocess.mark(s3, plan, stamp, progress=lambda n: progress.advance(task, n))
    out.print(
        f"marked for re-ingestion: {marked.done:,} document(s) ({marked.created:,} metadata file(s) made, "
        f"{marked.updated:,} updated with your attributes and the file's settings kept): "
        f"{reprocess.ATTRIBUTE}={stamp}. Why metadata: a metadata change is documented to re-ingest a "
        "document in full; direct ingestion is not documented to run the transformation"
    )
    for key, why in marked.skipped[:20]:
        errors.print(
            Text.assemble(("not marked:", "yellow"), " ", plain_line(f"s3://{plan.bucket}/{key}: {why}"))
        )
    if len(marked.skipped) > 20:
        errors.print(f"... and {len(marked.skipped) - 20:,} more not marked")
    if marked.errors:
        raise CliError(
            f"{len(marked.errors):,} of {len(plan.documents):,} document(s) not marked for S3 errors (first: "
            f"{marked.errors[0][1]})",
            "no ingestion job started",
            "fix access to the bucket (s3:GetObject, s3:PutObject, s3:GetObjectTagging, s3:PutObjectTagging "
            "and the KMS key on the metadata files), then run ckb sync --reprocess again"
            + (f"; ckb sync alone re-ingests the {marked.done:,} marked" if marked.done else ""),
        )
    if not marked.done:
        raise CliError("no document marked", "every one was left out (above)", "no ingestion job started")
    return _Reprocessed(plan.archived, marked.skipped)


def _many_fallbacks(deployment: Deployment, job: Job) -> bool:
    """The job's chunks mostly did not get the model's context (CloudWatch; no verdict without metrics)."""
    from contextual_kb.query.doctor import FALLBACK_SHARE_TO_SUGGEST, fallbacks_during

    if job.started_at is None or job.updated_at is None:
        return False
    try:
        fell, chunks = fallbacks_during(
            lambda service: aws_clients.client(service, deployment.region), job.started_at, job.updated_at
        )
    except (ClientError, BotoCoreError):
        return False  # no metrics to read: say nothing rather than guess
    if chunks and fell / chunks > FALLBACK_SHARE_TO_SUGGEST:
        errors = error_console()
        errors.print(f"{fell:,} of {chunks:,} chunks got the structural context, not the model's")
        return True
    return False


def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
    stack: Stack = DEFAULT_STACK,
    region: Region = None,
) -> None:
    """Check a deployed stack before the first sync: the transformation, the function's settings, model
    access, the embedding model and reranker, Bedrock quotas, the intermediate bucket. Exit 1 on a failure."""
    from contextual_kb.query.deployment import DeploymentError
    from contextual_kb.query.doctor import Check, run

    try:
        deployment = deployment_of(stack, region)
    except DeploymentError as exc:
        checks = [Check("stack", "fail", str(exc), "deploy it with make deploy, or pass --stack / --region")]
    else:
        checks = list(run(deployment, lambda service: aws_clients.client(service, deployment.region)))
    if as_json:
        write_json([c.as_dict() for c in checks])
    else:
        out = console()
        marks = {"ok": ("✔", "green"), "fail": ("✘", "bold red"), "warn": ("!", "yellow")}
        for check in checks:
            mark, style = marks[check.status]
            line = Text.assemble((mark, style), " ", (check.name, "bold"), ": ", plain(check.detail))
            if check.todo:
                line.append_text(Text.assemble(". ", plain(check.todo)))
            out.print(line)
    if any(c.status == "fail" for c in checks):
        raise typer.Exit(code=1)


def ingestion_of(deployment: Deployment) -> Ingestion:
    client = aws_clients.client("bedrock-agent", deployment.region)
    return Ingestion(deployment.knowledge_base_id, deployment.data_source_id, deployment.region, client)


def retriever_of(deployment: Deployment, reranker: str, no_rerank: bool, search: str) -> Retriever:
    retriever = Retriever(
        deployment.knowledge_base_id,
        deployment.region,
        reranker=None if no_rerank or reranker == "none" else reranker,
        search_type="SEMANTIC" if search.lower() == "semantic" else "HYBRID",
        client=aws_clients.client("bedrock-agent-runtime", deployment.region),
    )
    if deployment.vector_store == "s3vectors":
        retriever.use_semantic_only("S3 Vectors has no lexical index")
    errors = error_console()
    for notice in retriever.notices:
        errors.print(Text.assemble(("note:", "yellow"), " ", plain(notice)))
    return retriever


def _search(
    text: str,
    k: int,
    stack: str,
    region: str | None,
    reranker: str,
    no_rerank: bool,
    search: str,
    metadata_filter: str | None,
) -> tuple[Deployment, list[Result]]:
    where = filter_of(metadata_filter)  # a bad filter is the user's first mistake to hear about
    deployment = deployment_of(stack, region)
    retriever = retriever_of(deployment, reranker, no_rerank, search)
    said = len(retriever.notices)
    results = retriever.search(text, k=k, filter=where)
    for notice in retriever.notices[said:]:  # what the search itself noticed (a candidate cut for Rerank)
        error_console().print(Text.assemble(("note:", "yellow"), " ", plain(notice)))
    return deployment, results


def filter_of(raw: str | None) -> dict[str, Any] | None:
    if not raw:
        return None
    example = '{"equals": {"key": "team", "value": "payments"}}'
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise usage("--filter", f"not JSON ({exc})", f"Give a Retrieve filter such as {example}") from None
    if not isinstance(value, dict):
        raise usage("--filter", "not a JSON object", f"Give a Retrieve filter such as {example}")
    return value


Reranker = Annotated[
    str,
    typer.Option(
        help="cohere.rerank-v3-5:0, amazon.rerank-v1:0 or none.",
        callback=choice([*RERANKERS, "none"]),
        metavar="MODEL",
    ),
]
NoRerank = Annotated[bool, typer.Option("--no-rerank", help="Keep the retrieval order.")]
Search = Annotated[
    str,
    typer.Option(
        help="hybrid (vectors + BM25) or semantic.",
        callback=choice(["hybrid", "semantic"], case_sensitive=False),
        metavar="TYPE",
    ),
]
Filter = Annotated[
    str | None, typer.Option("--filter", help="A Retrieve metadata filter, as JSON.", metavar="JSON")
]


def query(
    text: Annotated[str, typer.Argument(help="What to search for.", metavar="TEXT")],
    k: Annotated[
        int,
        typer.Option(
            help="Results to retrieve (1-100; --json prints them all).", min=1, max=100, metavar="N"
        ),
    ] = 20,
    show: Annotated[
        int, typer.Option(help="Results to print of the K (0: all of them).", min=0, metavar="N")
    ] = 5,
    full: Annotated[
        bool, typer.Option("--full", help="Print whole chunks (else their first 360 characters).")
    ] = False,
    no_rerank: NoRerank = False,
    reranker: Reranker = DEFAULT_RERANKER,
    search: Search = "hybrid",
    metadata_filter: Filter = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    stack: Stack = DEFAULT_STACK,
    region: Region = None,
) -> None:
    """Retrieve wide (hybrid), rerank, and show the top chunks with their contexts and sources: the first
    --show of the K, each a panel read at any width."""
    _, results = _search(text, k, stack, region, reranker, no_rerank, search, metadata_filter)
    if as_json:
        write_json([r.as_dict() for r in results])
        return
    from contextual_kb.cli.render import print_results

    print_results(console(), results, show=show, full=full)


def ask(
    question: Annotated[str, typer.Argument(help="The question.", metavar="QUESTION")],
    k: Annotated[
        int, typer.Option(help="Chunks given to the model (1-100).", min=1, max=100, metavar="N")
    ] = 10,
    model: Annotated[
        str | None,
        typer.Option(
            help="Model or inference profile.", show_default="MODEL_ID, or Claude Haiku 4.5", metavar="ID"
        ),
    ] = None,
    no_rerank: NoRerank = False,
    reranker: Reranker = DEFAULT_RERANKER,
    search: Search = "hybrid",
    metadata_filter: Filter = None,
    stack: Stack = DEFAULT_STACK,
    region: Region = None,
) -> None:
    """Answer a question from the reranked chunks with Claude on Bedrock, citing its sources."""
    from contextual_kb.query.answering import answer_request
    from contextual_kb.runtime.context.claude.client import ClaudeClient, ModelCallError
    from contextual_kb.runtime.settings import DEFAULT_MODEL_ID

    deployment, results = _search(question, k, stack, region, reranker, no_rerank, search, metadata_filter)
    if not results:
        raise CliError("no answer", "nothing in the knowledge base matches the question")
    client = ClaudeClient(region=deployment.region, timeout_seconds=120, max_retries=4, max_connections=1)
    model_id = model or os.environ.get("MODEL_ID") or DEFAULT_MODEL_ID
    try:
        reply = client.invoke(answer_request(model_id, question, results))
    except ModelCallError as exc:
        raise CliError(f"the call to {model_id} failed", str(exc), MODEL_ACCESS_TODO) from None
    finally:
        client.close()
    out = console()
    out.print(plain(reply.text.strip()))
    out.print()
    for r in results:
        out.print(plain_line(f"[{r.rank}] {r.source}"))


def _progress_line(status: str, stats: dict[str, int]) -> str:
    indexed = stats.get("numberOfNewDocumentsIndexed", 0) + stats.get("numberOfModifiedDocumentsIndexed", 0)
    scanned, failed = stats.get("numberOfDocumentsScanned", 0), stats.get("numberOfDocumentsFailed", 0)
    return f"{status}: {scanned} scanned, {indexed} indexed, {failed} failed"


def register(app: typer.Typer) -> None:
    for command in (upload, sync, query, ask, doctor):
        app.command()(command)
