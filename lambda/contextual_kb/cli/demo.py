"""`make demo`: the whole ingestion-side path, offline.

A local S3 (moto) on 127.0.0.1; sample documents uploaded to a source bucket; each chunked the way the KB's
fixed-size chunking does and staged as batch objects in the intermediate bucket, in the exact contract
format; the real Lambda handler invoked on the event the KB would send; chunks shown before and after. Then
the query side: a local Knowledge Base over HTTP syncs the same documents (the real handler again, the
contexts remembered) and answers a query as ``ckb query`` shows it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
from rich.console import Console

from contextual_kb.cli.errors import CliError
from contextual_kb.cli.render import STANDIN_CONTEXT, print_chunks, print_summary
from contextual_kb.cli.terminal import status_line
from contextual_kb.local import runner, s3server
from contextual_kb.local.inputs import InputFileError
from contextual_kb.local.kb_chunking import fixed_size_chunks
from contextual_kb.local.kb_ingestion import refusal
from contextual_kb.local.kb_staging import build_event, stage_file
from contextual_kb.local.model_endpoint import ModelEndpoint
from contextual_kb.runtime import handler
from contextual_kb.runtime.context.claude.pricing import min_cache_tokens, model_label
from contextual_kb.runtime.context.claude.windows import estimate_tokens
from contextual_kb.runtime.documents import assemble
from contextual_kb.runtime.enrichment import BODY_SEPARATOR

SOURCE_BUCKET = "contextual-kb-source-demo"
DEMO_KNOWLEDGE_BASE = "DEMOKB0001"
DEMO_DATA_SOURCE = "DEMODS0001"
INTERMEDIATE_BUCKET = "contextual-kb-intermediate-demo"


def run_demo(
    console: Console,
    documents: Path,
    *,
    max_tokens: int,
    overlap: int,
    chunks_per_batch: int,
    show: int,
    endpoint: ModelEndpoint | None = None,
    then: Callable[[], None] | None = None,
    question: str | None = None,
) -> bool:
    """Stage and transform the documents, show them; then ``then`` (the demo's retrieval table) and, with
    ``question``, the query side on the same local S3."""
    texts, notes = read_folder(documents)
    console.rule("contextual-kb demo (offline)")
    for note in notes:
        console.print(f"note: {note}", markup=False)
    console.print(
        f"strategy {os.environ.get('CONTEXT_STRATEGY', 'claude')} · fixed-size chunking "
        f"{max_tokens} tokens, {overlap}% overlap · {chunks_per_batch} chunks per batch object"
    )
    if endpoint is not None:
        console.print(f"model calls: {endpoint.description}")
    # Each long step says what it does on stderr while it runs (a terminal only): a big document takes
    # minutes to chunk, transform and sync.
    with s3server.local_s3() as s3_endpoint, status_line("starting", output=console) as progress:
        console.print(f"local S3 (moto) at {s3_endpoint}")
        s3 = boto3.client("s3")
        for bucket in (SOURCE_BUCKET, INTERMEDIATE_BUCKET):
            s3.create_bucket(Bucket=bucket)
        staged = []
        for number, (given, text) in enumerate(texts.items(), 1):
            # A type the Knowledge Base refuses (code: token_bucket.py) goes as .txt, as ckb eval names it.
            name = given if not refusal(given) else f"{given}.txt"
            progress(f"chunking and staging {name} ({number} of {len(texts)}, {len(text):,} characters)")
            s3.put_object(Bucket=SOURCE_BUCKET, Key=name, Body=text.encode("utf-8"))
            chunks = fixed_size_chunks(text, max_tokens=max_tokens, overlap_percentage=overlap)
            staged.append(
                stage_file(
                    s3,
                    INTERMEDIATE_BUCKET,
                    f"s3://{SOURCE_BUCKET}/{name}",
                    chunks,
                    chunks_per_batch=chunks_per_batch,
                    file_metadata={"source_name": name},
                )
            )
        event = build_event(INTERMEDIATE_BUCKET, staged)
        chunk_count = sum(len(f.chunks) for f in staged)
        console.print(
            f"staged {chunk_count} chunks of {len(staged)} documents in "
            f"{sum(len(f.batch_keys) for f in staged)} batch objects; invoking the handler…\n"
        )
        calls = " (a model call each)" if endpoint is not None else ""
        progress(f"the handler gives {chunk_count:,} chunks their contexts{calls}")
        result = runner.invoke(event)
        progress("checking the chunks")

        print_summary(console, result)
        if endpoint is not None:
            for line in model_lines(result, endpoint, [assemble(f.chunks).text for f in staged]):
                console.print(f"  {line}")
        for f in staged:
            rebuilt = assemble(f.chunks).text
            console.print(
                f"  {f.source_uri.rsplit('/', 1)[-1]}: chunks hold {sum(len(c) for c in f.chunks):,} "
                f"characters, the rebuilt document {len(rebuilt):,} (overlaps joined once)"
            )
        intact = _every_chunk_back_once(result)
        console.print(
            f"\nevery chunk back exactly once, in order, original text intact: {'yes' if intact else 'NO'}\n",
            style="bold green" if intact else "bold red",
        )
        if show:
            standin = endpoint is not None and endpoint.kind == "stand-in"
            print_chunks(console, result, show, label=STANDIN_CONTEXT if standin else "context")
        # The query's sync runs the handler again: free when its contexts are remembered or the model is the
        # stand-in; with remembering off, a paid endpoint would bill every context a second time.
        if question and _would_pay_again(endpoint):
            console.print(
                "note: no query at the end: remembering is off (CONTEXT_MEMORY_PREFIX is empty), so the "
                "local Knowledge Base's sync would pay for every context again",
                markup=False,
            )
            question = None
        # Queried before ``then`` runs, shown after it: the retrieval table's run resets moto's state (its
        # mock_aws shares moto's backends with this local S3), so the demo ends with the query.
        if question:
            progress(f"a local Knowledge Base syncs the {len(staged)} documents for the query")
        answered = (
            query_demo(
                question,
                max_tokens=max_tokens,
                overlap=overlap,
                chunks_per_batch=chunks_per_batch,
                standin=endpoint is not None and endpoint.kind == "stand-in",
            )
            if question
            else None
        )
        progress("retrieval quality on the codebase benchmark")
        if then is not None:
            then()
        if answered is not None:
            answered(console)
    return intact


def _would_pay_again(endpoint: ModelEndpoint | None) -> bool:
    settings = handler.runtime()[0]
    paid = endpoint is not None and endpoint.kind != "stand-in"
    return paid and settings.context_strategy == "claude" and not settings.context_memory_prefix


def query_demo(
    question: str, *, max_tokens: int, overlap: int, chunks_per_batch: int, standin: bool, k: int = 3
) -> Callable[[Console], None]:
    """The query side on the documents just staged: a local Knowledge Base over HTTP on the demo's buckets
    syncs them (its ingestion runs the real handler again, which finds the contexts remembered above) and
    answers ``ckb query``'s Retrieve and Rerank. Returns what shows it, as ``ckb query`` shows it."""
    from contextual_kb.cli.render import print_result_panels
    from contextual_kb.evaluation.lexical import ANALYZERS
    from contextual_kb.local.environment import environment
    from contextual_kb.local.knowledge_base import (
        DataSourceSpec,
        KnowledgeBaseSpec,
        LocalKnowledgeBase,
        running,
    )
    from contextual_kb.query import aws_clients
    from contextual_kb.query.ingestion import Ingestion
    from contextual_kb.query.retrieval import Retriever

    calls: list[int] = []
    remembered: list[int] = []

    def transform(event: dict[str, Any]) -> dict[str, Any]:
        done = runner.invoke(event, capture_stdout=False)  # on the job's thread
        model = done.summary().get("model", {})
        calls.append(int(model.get("calls", 0)))
        remembered.append(int(model.get("chunks_remembered", 0)))
        return done.response

    source = DataSourceSpec(
        DEMO_DATA_SOURCE,
        SOURCE_BUCKET,
        INTERMEDIATE_BUCKET,
        max_tokens=max_tokens,
        overlap_percentage=overlap,
        chunks_per_batch=chunks_per_batch,
    )
    service = LocalKnowledgeBase(
        [KnowledgeBaseSpec(DEMO_KNOWLEDGE_BASE, [source])],
        analyzer=ANALYZERS["index"],
        s3=lambda: boto3.client("s3"),
        invoke=transform,
    )
    with (
        running(service) as kb,
        environment(AWS_ENDPOINT_URL_BEDROCK_AGENT=kb.url, AWS_ENDPOINT_URL_BEDROCK_AGENT_RUNTIME=kb.url),
    ):
        region = aws_clients.region()
        ingestion = Ingestion(
            DEMO_KNOWLEDGE_BASE, DEMO_DATA_SOURCE, region, aws_clients.client("bedrock-agent", region)
        )
        states = list(ingestion.follow(ingestion.start(), interval=0.1))
        job = states[-1]
        if job.status != "COMPLETE" or job.statistics.get("numberOfDocumentsFailed"):
            reasons = list(job.failure_reasons) + [
                f"{d.uri}: {d.reason}" for d in ingestion.failed_documents()
            ]
            raise CliError(f"the local ingestion job ended {job.status}", "; ".join(reasons) or "no reason")
        stats = job.statistics
        synced = (
            f"local Knowledge Base at {kb.url}: ingestion job {job.job_id} {job.status}: "
            f"{stats.get('numberOfDocumentsScanned', 0)} scanned, "
            f"{stats.get('numberOfNewDocumentsIndexed', 0)} indexed, "
            f"{stats.get('numberOfDocumentsFailed', 0)} failed; its transformation made {sum(calls)} model "
            f"calls and found {sum(remembered)} chunks' contexts remembered from the run above"
        )
        retriever = Retriever(
            DEMO_KNOWLEDGE_BASE, region, client=aws_clients.client("bedrock-agent-runtime", region)
        )
        results = retriever.search(question, k=k)

    def show(console: Console) -> None:
        console.rule("query: a local Knowledge Base over HTTP (ckb sync, ckb query)")
        console.print(synced, markup=False)
        console.print(
            f'ckb query "{question}" --k {k}: Retrieve (HYBRID; BM25 with the deployed index\'s analysis, '
            "no vectors offline) then Rerank (a deterministic stand-in, not Cohere's model)",
            markup=False,
        )
        print_result_panels(console, results, label=STANDIN_CONTEXT if standin else "context")

    return show


def read_folder(documents: Path) -> tuple[dict[str, str], list[str]]:
    """The folder's text documents by file name, and a note for each file skipped or read as Latin-1."""
    texts: dict[str, str] = {}
    notes: list[str] = []
    for path in sorted(p for p in documents.iterdir() if p.is_file()):
        text, note = read_text_document(path.name, path.read_bytes())
        if text is not None:
            texts[path.name] = text
        if note:
            notes.append(note)
    if not texts:
        raise InputFileError(
            f"{documents}: no text documents in this folder"
            + (f" ({len(notes)} skipped: {notes[0]})" if notes else "")
            + "; give --documents a folder of text files"
        )
    return texts, notes


def document_sizes(documents: Path, *, max_tokens: int, overlap: int) -> list[tuple[int, int]]:
    """(tokens by the model engine's estimate, chunks) of each document the demo would stage."""
    texts, _ = read_folder(documents)
    return [
        (
            estimate_tokens(text),
            len(fixed_size_chunks(text, max_tokens=max_tokens, overlap_percentage=overlap)),
        )
        for text in texts.values()
    ]


# What a Knowledge Base's parser reads and the demo does not: it stages text, as the KB's chunker gets it.
_BINARY_KINDS = {
    b"%PDF": "PDF",
    b"PK\x03\x04": "a zip archive (Word, Excel, PowerPoint)",
    b"\xd0\xcf\x11\xe0": "an Office file",
}


def read_text_document(name: str, data: bytes) -> tuple[str | None, str]:
    """(text, note) of a file for the demo: UTF-8 text as it is; other text read as Latin-1 (which never
    fails) with a note; binary formats and empty files skipped with a note saying why. Pure."""
    kind = next((label for magic, label in _BINARY_KINDS.items() if data.startswith(magic)), None)
    if kind is None and b"\x00" in data[:8192]:
        kind = "binary"
    if kind is not None:
        return None, (
            f"skipped {name}: {kind}, not text; the demo stages text files (a Knowledge Base parses PDF, "
            "Word and HTML itself before our function sees the chunks)"
        )
    if not data.strip():
        return None, f"skipped {name}: empty"
    try:
        return data.decode("utf-8-sig"), ""
    except UnicodeDecodeError:
        return data.decode("latin-1"), f"{name} is not UTF-8: read as Latin-1 (the KB expects UTF-8 text)"


def model_lines(result: runner.RunResult, endpoint: ModelEndpoint, documents: list[str]) -> list[str]:
    """What the model calls were, what they would cost on Bedrock, and why the cache was (not) used."""
    summary = result.summary()
    model = summary.get("model", {})
    settings = handler.runtime()[0]
    label = model_label(settings.model_id)
    calls = int(model.get("calls", 0))
    lines = [
        f"model calls {calls} ({endpoint.kind}) · cache writes {model.get('cache_writes', 0)} · tokens: "
        f"{model.get('input_tokens', 0):,} input, {model.get('cache_write_tokens', 0):,} cache-write, "
        f"{model.get('cache_read_tokens', 0):,} cache-read, {model.get('output_tokens', 0):,} output"
    ]
    cost = model.get("estimated_cost_usd")
    if calls and cost is not None:
        where = "cost" if endpoint.kind == "Bedrock" else "would cost"
        lines.append(
            f"on Amazon Bedrock these calls {where} about ${cost:.4f} ({label}, {settings.model_id})"
        )
    minimum = min_cache_tokens(settings.model_id, settings.min_cache_tokens)
    largest = max((estimate_tokens(text) for text in documents), default=0)
    if calls and not model.get("cache_writes") and largest < minimum:
        lines.append(
            f"no prompt caching: every document is under {label}'s {minimum:,}-token cacheable minimum (the "
            f"largest is about {largest:,} tokens), so each call sends its document uncached; a longer "
            "document is written to the cache once and read by its other calls at a tenth of the price"
        )
    fallbacks = model.get("fallbacks") or {}
    if fallbacks:
        reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(fallbacks.items()))
        lines.append(f"chunks given the structural context instead of the model's: {reasons}")
    return lines


def _every_chunk_back_once(result: runner.RunResult) -> bool:
    for in_keys, produced in zip(result.response_inputs(), result.response["outputFiles"], strict=True):
        before = [i for k in in_keys for i in result.before[k].file_contents]
        after = [i for b in produced["contentBatches"] for i in result.after[b["key"]].file_contents]
        if len(before) != len(after):
            return False
        for old, new in zip(before, after, strict=True):
            if new.content_body != old.content_body and not new.content_body.endswith(
                BODY_SEPARATOR + old.content_body
            ):
                return False
    return True
