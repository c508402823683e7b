"""`make demo`: the whole ingestion-side path, offline.

A local S3 (moto) on 127.0.0.1; sample documents uploaded to a source bucket; each chunked the way the KB's
fixed-size chunking does and staged as batch objects in the intermediate bucket, in the exact contract
format; the real Lambda handler invoked on the event the KB would send; chunks shown before and after.
"""

from __future__ import annotations

import os
from pathlib import Path

import boto3
from rich.console import Console

from contextual_kb.documents import assemble
from contextual_kb.enrichment import BODY_SEPARATOR
from contextual_kb.local import runner, s3server
from contextual_kb.local.kb_chunking import fixed_size_chunks
from contextual_kb.local.kb_staging import build_event, stage_file
from contextual_kb.local.model_endpoint import ModelEndpoint
from contextual_kb.local.render import print_chunks, print_summary

SOURCE_BUCKET = "contextual-kb-source-demo"
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
) -> bool:
    paths = sorted(p for p in documents.iterdir() if p.is_file())
    if not paths:
        raise SystemExit(f"no documents in {documents}")
    console.rule("[bold]contextual-kb demo (offline)")
    console.print(
        f"strategy [bold]{os.environ.get('CONTEXT_STRATEGY', 'claude')}[/] · fixed-size chunking "
        f"{max_tokens} tokens, {overlap}% overlap · {chunks_per_batch} chunks per batch object"
    )
    if endpoint is not None:
        console.print(f"model calls: {endpoint.description}")
    with s3server.local_s3() as s3_endpoint:
        console.print(f"local S3 (moto) at {s3_endpoint}")
        s3 = boto3.client("s3")
        for bucket in (SOURCE_BUCKET, INTERMEDIATE_BUCKET):
            s3.create_bucket(Bucket=bucket)
        staged = []
        for path in paths:
            text = path.read_text(encoding="utf-8")
            s3.put_object(Bucket=SOURCE_BUCKET, Key=path.name, Body=text.encode("utf-8"))
            chunks = fixed_size_chunks(text, max_tokens=max_tokens, overlap_percentage=overlap)
            staged.append(
                stage_file(
                    s3,
                    INTERMEDIATE_BUCKET,
                    f"s3://{SOURCE_BUCKET}/{path.name}",
                    chunks,
                    chunks_per_batch=chunks_per_batch,
                    file_metadata={"source_name": path.name},
                )
            )
        event = build_event(INTERMEDIATE_BUCKET, staged)
        console.print(
            f"staged {sum(len(f.chunks) for f in staged)} chunks of {len(staged)} documents in "
            f"{sum(len(f.batch_keys) for f in staged)} batch objects; invoking the handler…\n"
        )
        result = runner.invoke(event)

    print_summary(console, result)
    if endpoint is not None and endpoint.standin is not None:
        stats = endpoint.standin.stats
        console.print(
            f"  model calls {stats.answered} (stand-in) · cache writes {stats.cache_writes}, reads "
            f"{stats.cache_reads} · tokens: {stats.input_tokens:,} input, {stats.cache_write_tokens:,} "
            f"cache-write, {stats.cache_read_tokens:,} cache-read, {stats.output_tokens:,} output"
        )
    for f in staged:
        rebuilt = assemble(f.chunks).text
        console.print(
            f"  {f.source_uri.rsplit('/', 1)[-1]}: chunks hold {sum(len(c) for c in f.chunks):,} characters, "
            f"the rebuilt document {len(rebuilt):,} (overlaps joined once)"
        )
    intact = _every_chunk_back_once(result)
    mark = "[bold green]yes[/]" if intact else "[bold red]NO[/]"
    console.print(f"\nevery chunk back exactly once, in order, original text intact: {mark}\n")
    if show:
        print_chunks(console, result, show)
    return intact


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
