"""``ckb contextualize``: the pending documents' contexts by Bedrock batch inference, then re-ingestion."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from contextual_kb.cli.datasets import SHOWN_DATASET, benchmark
from contextual_kb.cli.errors import CliError, usage
from contextual_kb.cli.kb import Region, Stack, deployment_of, ingestion_of
from contextual_kb.cli.paid import YES_HELP
from contextual_kb.cli.terminal import console, error_console, plain, write_json
from contextual_kb.query.deployment import DEFAULT_STACK


def contextualize(
    local: Annotated[
        bool,
        typer.Option(
            "--local",
            help="Offline, end to end on a corpus: local S3, the handler with CONTEXT_DEFER=always, a batch "
            "inference stand-in, then the handler again as the re-ingestion. No AWS account.",
        ),
    ] = False,
    corpus: Annotated[
        Path | None,
        typer.Option(
            help="With --local: the corpus (the codebase benchmark's format).",
            exists=True,
            dir_okay=False,
            metavar="FILE",
            show_default=SHOWN_DATASET,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Plan only: records, tokens and the cost, nothing written.")
    ] = False,
    group_size: Annotated[
        int, typer.Option(help="Chunks a record asks for.", min=1, max=64, metavar="N")
    ] = 40,
    on_demand_retry: Annotated[
        bool,
        typer.Option("--on-demand-retry", help="Ask records that failed in a batch job again, on demand."),
    ] = False,
    reingest: Annotated[
        bool,
        typer.Option(
            "--reingest/--no-reingest",
            help="End by ingesting the documents that got contexts again (S3 data sources: metadata files "
            "marked, as ckb sync --reprocess). A document that cannot be marked is named, kept pending "
            "(awaiting re-ingestion) and the command exits 1.",
        ),
    ] = True,
    min_records: Annotated[
        int | None,
        typer.Option(
            envvar="CKB_BATCH_MIN_RECORDS",
            help="A job's minimum of records (the model's quota in Service Quotas; commonly 100, the local "
            "stand-in's 10).",
            min=1,
            metavar="N",
        ),
    ] = None,
    max_records: Annotated[
        int,
        typer.Option(
            envvar="CKB_BATCH_MAX_RECORDS",
            help="Records per batch inference job (the model's quota in Service Quotas).",
            min=1,
            metavar="N",
        ),
    ] = 50_000,
    max_file_records: Annotated[
        int,
        typer.Option(
            envvar="CKB_BATCH_MAX_FILE_RECORDS",
            help="Records per input file (a quota of its own; a job here has one input file).",
            min=1,
            metavar="N",
        ),
    ] = 50_000,
    max_file_bytes: Annotated[
        int,
        typer.Option(
            envvar="CKB_BATCH_MAX_FILE_BYTES",
            help="An input file's maximum size (the model's quota in Service Quotas).",
            min=1,
            metavar="BYTES",
        ),
    ] = 1024**3,
    max_job_bytes: Annotated[
        int,
        typer.Option(
            envvar="CKB_BATCH_MAX_JOB_BYTES",
            help="A job's maximum input size (the model's quota in Service Quotas).",
            min=1,
            metavar="BYTES",
        ),
    ] = 5 * 1024**3,
    batch_prices: Annotated[
        str,
        typer.Option(
            envvar="BATCH_PRICES",
            help='Batch prices in USD per million tokens, JSON: {"input": 0.5, "output": 2.5}.',
            metavar="JSON",
        ),
    ] = "",
    poll_seconds: Annotated[
        float, typer.Option(help="Seconds between job status checks.", min=0.01, metavar="SECONDS")
    ] = 30.0,
    shard_documents: Annotated[
        int,
        typer.Option(
            envvar="CKB_SHARD_DOCUMENTS",
            help="Plan and store a new run in shards of about N pending documents, one after the other "
            "(the workflow's way, its Distributed Maps running them side by side); 0: in one piece. A "
            "sharded run (the workflow's) is resumed in shards whatever this says.",
            min=0,
            metavar="N",
        ),
    ] = 0,
    status: Annotated[
        bool,
        typer.Option(
            "--status",
            help="Where the deferred loop stands, reading only: the run under way (or the latest), who "
            "holds it, its jobs, contexts stored, documents re-ingested and the cost so far against the "
            "floor; with autoContextualize, the workflow's latest executions.",
        ),
    ] = False,
    workflow: Annotated[
        bool,
        typer.Option(
            "--workflow",
            help="Start the stack's workflow (autoContextualize) instead of running here: one look, in AWS, "
            "that resumes the run under way or plans a new one. --status follows it.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print only the summary, as JSON.")] = False,
    yes: Annotated[bool, typer.Option("--yes", help=YES_HELP)] = False,
    stack: Stack = DEFAULT_STACK,
    region: Region = None,
) -> None:
    """Make the model contexts that ingestion left pending (CONTEXT_DEFER) with Bedrock batch inference at
    half the on-demand price, store them where the function reads them, and ingest those documents again."""
    from contextual_kb.deferred.records import Limits
    from contextual_kb.runtime.context.claude.pricing import batch_prices_for
    from contextual_kb.runtime.errors import TransformationError

    if status or workflow:
        if local:
            raise usage("--status" if status else "--workflow", "reads the stack's run, not with --local")
        _status(stack, region, start=workflow, as_json=as_json)
        return
    try:
        batch_prices_for("claude-haiku-4-5", batch_prices)
    except TransformationError as exc:
        raise usage("--batch-prices", str(exc).removeprefix("batch prices: ")) from None
    out = console()
    log = (lambda _: None) if as_json else (lambda line: out.print(plain(line)))
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=error_console(),
        transient=True,
    )
    tasks: dict[str, Any] = {}

    def progress(name: str, done: int, total: int) -> None:
        if not tasks:  # shown from the first job followed: a run that stops before prints no empty bar
            bar.start()
        if name not in tasks:
            tasks[name] = bar.add_task(name, total=total)
        bar.update(tasks[name], completed=done)

    if local and corpus is None:
        corpus, _queries = benchmark(
            todo="Pass --corpus FILE (a corpus in the codebase benchmark's format), or set CKB_DATA_DIR to a "
            "folder holding codebase/codebase_chunks.json"
        )
    try:
        if local:
            from contextual_kb.local.environment import offline_aws

            # The user's AWS setup is not read offline, from before the runtime is imported (its tracer
            # builds an X-Ray client, which reads the profile).
            with offline_aws():
                from contextual_kb.deferred.offline import run_local
                from contextual_kb.evaluation.offline import load_corpus
                from contextual_kb.local.batch_standin import BatchConfig

                config = BatchConfig()
                limits = Limits(
                    min_records or config.min_records,
                    max_records,
                    max_file_records,
                    max_file_bytes,
                    max_job_bytes,
                )
                run = run_local(
                    load_corpus(corpus),  # type: ignore[arg-type] # set above with --local
                    group_size=group_size,
                    limits=limits,
                    batch=config,
                    on_demand_retry=on_demand_retry,
                    dry_run=dry_run,
                    shard_documents=shard_documents,
                    log=log,
                    progress=progress,
                )
            result = run.as_dict()
        else:
            limits = Limits(min_records or 100, max_records, max_file_records, max_file_bytes, max_job_bytes)
            result = _on_aws(
                stack,
                region,
                limits,
                group_size,
                on_demand_retry,
                dry_run,
                batch_prices,
                poll_seconds,
                reingest,
                log,
                progress,
                yes,
                shard_documents,
            )
    finally:
        if tasks:
            bar.stop()
    if as_json:
        write_json(result)
    else:
        _print(result, local=local)
    if result.get("awaiting_reingestion") and reingest and not dry_run:
        raise CliError(
            f"{result['awaiting_reingestion']} document(s) got their contexts but were not re-ingested",
            "they could not be marked (each named above with why); their records stay pending, awaiting "
            "re-ingestion",
            "fix what is said, then run ckb contextualize again (it marks them again, at no model cost)",
        )


def _on_aws(
    stack: str,
    region: str | None,
    limits: Any,
    group_size: int,
    on_demand_retry: bool,
    dry_run: bool,
    batch_prices: str,
    poll_seconds: float,
    reingest: bool,
    log: Any,
    progress: Any,
    yes: bool,
    shard_documents: int = 0,
) -> dict[str, Any]:
    from contextual_kb.cli.paid import confirm
    from contextual_kb.deferred import sequence, services
    from contextual_kb.deferred.concurrency import S3_CONNECTIONS
    from contextual_kb.deferred.contextualize import Contextualizer, Options
    from contextual_kb.query import aws_clients
    from contextual_kb.runtime.context.claude.client import ClaudeClient

    deployment = deployment_of(stack, region)
    if not deployment.batch_role_arn:
        raise CliError(
            f"stack {deployment.stack} has no BatchRoleArn output",
            "it was deployed before batch inference was added",
            "deploy it again (make deploy)",
        )
    ingestion = ingestion_of(deployment)
    running = ingestion.running()
    if running is not None and not dry_run:
        raise CliError(
            f"ingestion job {running.job_id} is {running.status}",
            "it may record pending documents while they are being contextualized",
            "wait for it to end (ckb sync follows it), then run ckb contextualize",
        )
    s3 = aws_clients.client("s3", deployment.region, connections=S3_CONNECTIONS)
    contextualizer = Contextualizer(
        s3,
        aws_clients.client("bedrock", deployment.region),
        Options(
            bucket=deployment.intermediate_bucket,
            role_arn=deployment.batch_role_arn,
            group_size=group_size,
            limits=limits,
            batch_prices=batch_prices,
            on_demand_retry=on_demand_retry,
            dry_run=dry_run,
            poll_seconds=poll_seconds,
            shard_documents=shard_documents,
        ),
        source_state=services.source_state(s3),
        on_demand=services.on_demand(
            ClaudeClient(region=deployment.region, timeout_seconds=120, max_retries=4, max_connections=8)
        ),
        log=log,
        progress=progress,
        confirm=lambda quote: confirm(
            f"contexts for {quote.pending_before:,} pending chunk(s) of {quote.documents:,} document(s) by "
            f"Bedrock batch inference ({quote.records:,} records)",
            f"about ${quote.cost_usd:,.2f}" + _assumed(quote.priced_on_demand),
            yes=yes,
        ),
    )
    mark = None
    if reingest:  # marked (shard by shard when sharded), then one ingestion job
        mark, contextualizer.start_ingestion = _mark_and_start(deployment, ingestion, s3, log)
    summary = sequence.run(contextualizer, mark)  # the phases to the end, here
    return summary.as_dict()


def _status(stack: str, region: str | None, *, start: bool, as_json: bool) -> None:
    """``--status`` (and ``--workflow``, which starts a look first): the run from the intermediate bucket,
    the workflow's executions from Step Functions."""
    from contextual_kb.deferred.status import run_status, start_workflow, workflow_runs
    from contextual_kb.query import aws_clients

    deployment = deployment_of(stack, region)
    machine = deployment.state_machine_arn
    if start and not machine:
        raise CliError(
            f"stack {deployment.stack} has no deferred workflow",
            "it was deployed without autoContextualize",
            "deploy it with -c autoContextualize=nightly (or after-ingestion, both), or run ckb "
            "contextualize here",
        )
    states = aws_clients.client("stepfunctions", deployment.region) if machine else None
    started = start_workflow(states, machine) if start else ""
    result = run_status(aws_clients.client("s3", deployment.region), deployment.intermediate_bucket)
    result["workflow"] = workflow_runs(states, machine) if states is not None else None
    if started:
        result["started"] = started
    if as_json:
        write_json(result)
        return
    _print_status(result)


def _print_status(result: dict[str, Any]) -> None:
    out = console()
    if result.get("started"):
        out.print(f"started the workflow: {result['started']}", markup=False)
    if not result["run"]:
        out.print(
            "no run yet: nothing was contextualized (ckb contextualize --dry-run quotes it)", markup=False
        )
    else:
        table = Table(title=f"ckb contextualize {result['run']}", show_header=False)
        table.add_column("what")
        table.add_column("value", justify="right")
        rows: list[tuple[str, Any]] = [
            ("phase", result["phase"]),
            ("under way, held by", result["held_by"] if result["under_way"] else "no (finished)"),
        ]
        if "pending" in result:
            cost_vs_floor = result["cost_vs_floor"]
            rows += [
                ("pending chunks planned", result["pending"]),
                ("documents", result["documents"]),
                ("records", result["records"]),
                ("jobs submitted / stored", f"{result['jobs_submitted']} / {result['jobs_stored']}"),
                ("contexts stored", result["contexts_stored"]),
                ("failed records", result["failed_records"]),
                ("documents re-ingested", result["reingested_documents"]),
                ("cost so far", f"${result['cost_usd']:.4f}"),
                ("floor (on demand, each document once)", f"${result['floor_usd']:.4f}"),
                ("cost / floor", "-" if cost_vs_floor is None else f"{cost_vs_floor:.3f}"),
            ]
        for name, value in rows:
            table.add_row(name, plain(str(value)))
        out.print(table)
        for job in result.get("jobs", []):
            out.print(f"job {job['name']}: {job['status']} ({job['records']} records)", markup=False)
    if result["workflow"] is None:
        out.print("no deferred workflow on this stack (deploy with -c autoContextualize=...)", markup=False)
        return
    runs = Table(title="the workflow's latest looks")
    for column in ("execution", "status", "outcome", "run", "started"):
        runs.add_column(column)
    for execution in result["workflow"]:
        runs.add_row(*(plain(str(execution[k])) for k in ("name", "status", "outcome", "run", "started")))
    out.print(runs)


def _reingest(deployment: Any, ingestion: Any, s3: Any, log: Any) -> Any:
    """Mark the documents that got contexts (their metadata files, as ckb sync --reprocess does: those still
    in S3 and writable), then, when any was marked, one ingestion job, followed; the model calls the
    function made meanwhile, from its metrics. Every document not marked is said, with why."""
    _, start_job = _mark_and_start(deployment, ingestion, s3, log)

    def run(sources: list[str]) -> Any:
        from contextual_kb.deferred.reingest import reingest_s3

        return reingest_s3(s3, sources, start_job, log)

    return run


def _mark_and_start(deployment: Any, ingestion: Any, s3: Any, log: Any) -> tuple[Any, Any]:
    """The re-ingestion in two: marking (a sharded run marks shard by shard), and the one ingestion job
    started and followed once all are marked."""

    def start_job() -> tuple[str, int | None]:
        from contextual_kb.query import aws_clients
        from contextual_kb.query.doctor import model_calls_during

        job = ingestion.start(fresh=True, notify=log)  # after any job that may have scanned before the marks
        log(f"ingestion job {job.job_id}: re-ingesting")
        for state in ingestion.follow(job):
            job = state
        log(f"ingestion job {job.job_id} ended {job.status}")
        if job.started_at is None or job.updated_at is None:
            return f"{job.job_id} {job.status}", None
        try:
            calls: int | None = model_calls_during(
                lambda service: aws_clients.client(service, deployment.region), job.started_at, job.updated_at
            )
        except Exception:
            calls = None
        return f"{job.job_id} {job.status}", calls

    def mark(sources: list[str]) -> Any:
        from contextual_kb.deferred.reingest import reingest_s3

        return reingest_s3(s3, sources, None, log)

    return mark, start_job


def _assumed(models: list[str]) -> str:
    """What a quote or a cost assumes for models without batch prices ("" when nothing)."""
    if not models:
        return ""
    return (
        f" (no batch prices known for {', '.join(models)}: priced at on-demand prices, an upper bound; "
        "batch is about half: --batch-prices gives them)"
    )


def _print(result: dict[str, Any], *, local: bool = False) -> None:
    out = console()
    title = f"ckb contextualize {result.get('run', '')}".strip()
    if local:
        title += " (local: S3 and batch inference stand-ins)"
    table = Table(title=title, show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    rows = [
        ("documents", result["documents"]),
        ("chunks", result["chunks"]),
        ("pending before", result["pending_before"]),
        ("records", result["records"]),
        ("batch jobs (failed)", f"{result['jobs']} ({result['jobs_failed']})"),
        ("records on demand", result["on_demand_records"]),
        ("failed records", result["failed_records"]),
        ("contexts stored", result["contexts_stored"]),
        ("chunks with a model context", result["model_contexts"]),
        ("pending after", result["pending_after"]),
        ("documents re-ingested", result["reingested_documents"]),
        ("awaiting re-ingestion (not marked)", result["awaiting_reingestion"]),
        (
            "model calls during re-ingestion",
            "-" if result["model_calls_during_reingest"] is None else result["model_calls_during_reingest"],
        ),
        (
            "cost"
            + (" on Bedrock, had it run there" if local else " (estimated)" if result["estimated"] else ""),
            f"${result['cost_usd']:.4f}",
        ),
        ("floor (on demand, each document once)", f"${result['floor_usd']:.4f}"),
        ("cost / floor", "-" if result["cost_vs_floor"] is None else f"{result['cost_vs_floor']:.3f}"),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    out.print(table)
    for reason, count in sorted((result.get("dropped") or {}).items()):
        out.print(f"dropped {count} pending record(s): {reason}", markup=False)
    for note in result.get("notes") or []:
        out.print(note, markup=False)
    for uri, why in sorted((result.get("not_reingested") or {}).items()):
        out.print(f"not re-ingested: {uri}: {why}", markup=False)
    if result.get("priced_on_demand"):
        out.print(f"cost{_assumed(result['priced_on_demand'])}", markup=False)
    if local:
        out.print(
            "local: the contexts are the batch stand-in's (made by rule, not by a model); the model ID is "
            "the one a stack would ask, and the costs are what Bedrock would charge for these tokens at its "
            "batch and on-demand prices: nothing was spent",
            markup=False,
        )


def register(app: typer.Typer) -> None:
    app.command(name="contextualize")(contextualize)
