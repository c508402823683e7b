"""Speed and cost of the claude strategy on the codebase corpus, against the Bedrock stand-in.

The whole corpus (90 documents, 737 chunks) is staged as the KB would stage it (moto S3, in process; 8
chunks per batch object) and goes through the real Lambda handler, once per mode, in one run:

- ``published``: the algorithm of the public samples, as a mode of ours: one call per chunk, sequential, no
  prompt caching, the batch object's own chunks as "the document";
- ``per_chunk``: ours, default settings (cache-aware scheduling, MAX_CONCURRENCY=32);
- ``grouped``: ours, CONTEXT_MODE=grouped;
- ``auto``: ours, CONTEXT_MODE=auto (per-chunk where the document is cached, grouped where it cannot be);
- ``per_chunk + quota``: ours again, with a requests-per-minute quota on the stand-in.

The stand-in runs in its own process (so it does not compete with the handler for the GIL), with 300 ms +
2 ms per output token of latency. Costs use Haiku 4.5 list prices on the stand-in's token counts (UTF-8
bytes / 3.5); "floor" is each document read once at the input price plus the context tokens written.

    .venv/bin/python bench/contextualize.py [--modes published,per_chunk,grouped,auto,quota] [--rpm 1200]
        [--documents N] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from pathlib import Path
from typing import Any

from corpus import DEFAULT_DATASET, load_documents, offline_environment  # bench/corpus.py

BUCKET = "bench-intermediate"
MODEL_ID = "global.anthropic.claude-haiku-4-5-20251001-v1:0"


def standin_stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/_standin/stats", timeout=10) as response:
        return json.loads(response.read())


def run_mode(
    documents: list[dict[str, Any]], env: dict[str, str], url: str
) -> tuple[float, dict[str, Any], bool]:
    """(handler seconds, the handler's summary log, every chunk back exactly once with its text intact)."""
    import boto3
    from moto import mock_aws

    from contextual_kb.evaluation.offline import stage_corpus
    from contextual_kb.local.kb_staging import build_event
    from contextual_kb.local.lambda_context import LocalLambdaContext
    from contextual_kb.local.runner import invoke
    from contextual_kb.runtime import handler

    for name in ("CONTEXT_MODE", "MAX_CONCURRENCY"):
        os.environ.pop(name, None)
    os.environ.update({"CONTEXT_STRATEGY": "claude", "ANTHROPIC_BEDROCK_BASE_URL": url, "MODEL_ID": MODEL_ID})
    os.environ.update(env)
    handler.runtime.cache_clear()
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        staged = stage_corpus(s3, BUCKET, documents)
        event = build_event(BUCKET, staged)
        result = invoke(event, LocalLambdaContext())
        elapsed = result.seconds
        intact = True
        for source, produced in zip(staged, result.response["outputFiles"], strict=True):
            items = [i for ref in produced["contentBatches"] for i in result.after[ref["key"]].file_contents]
            intact &= len(items) == len(source.chunks) and all(
                i.content_body.endswith("\n\n" + c) for i, c in zip(items, source.chunks, strict=True)
            )
    handler.runtime.cache_clear()
    summary = next(
        (json.loads(line) for line in result.log.splitlines() if '"transformation complete"' in line), {}
    )
    return elapsed, summary, intact


def corpus_figures(documents: list[dict[str, Any]]) -> dict[str, int]:
    from contextual_kb.local.bedrock_standin import count_tokens
    from contextual_kb.runtime.context.claude.pricing import min_cache_tokens
    from contextual_kb.runtime.context.claude.prompts import SYSTEM

    minimum = min_cache_tokens(MODEL_ID)
    cacheable = sum(
        1
        for d in documents
        if len(d["chunks"]) > 1
        and count_tokens(SYSTEM) + count_tokens(f"<document>\n{d['content']}\n</document>") >= minimum
    )
    return {
        "documents": len(documents),
        "chunks": sum(len(d["chunks"]) for d in documents),
        "document_tokens": sum(count_tokens(d["content"]) for d in documents),
        "cacheable_documents": cacheable,
    }


def row(
    name: str,
    elapsed: float,
    summary: dict[str, Any],
    stats: dict[str, Any],
    corpus: dict[str, int],
    intact: bool,
) -> dict[str, Any]:
    from contextual_kb.runtime.context.claude.pricing import cost_usd, prices_for

    prices = prices_for(MODEL_ID)
    assert prices is not None
    cost = cost_usd(
        prices,
        input_tokens=stats["input_tokens"],
        cache_write_tokens=stats["cache_write_tokens"],
        cache_read_tokens=stats["cache_read_tokens"],
        output_tokens=stats["output_tokens"],
        ttl="5m",
    )
    floor = (corpus["document_tokens"] * prices.input + stats["output_tokens"] * prices.output) / 1e6
    per_million = cost / (corpus["document_tokens"] / 1e6)
    total_input = stats["input_tokens"] + stats["cache_write_tokens"] + stats["cache_read_tokens"]
    model = summary.get("model", {})
    return {
        "mode": name,
        "seconds": round(elapsed, 1),
        "chunks_per_second": round(corpus["chunks"] / elapsed, 2),
        "calls": stats["answered"],
        "throttled": stats["throttled"],
        "cache_writes": stats["cache_writes"],
        "cache_writes_per_cacheable_document": round(
            stats["cache_writes"] / max(1, corpus["cacheable_documents"]), 2
        ),
        "max_writes_per_prefix": stats["max_writes_per_prefix"],
        "cache_read_share": round(stats["cache_read_tokens"] / total_input, 3) if total_input else 0.0,
        "cost_usd": round(cost, 4),
        "cost_per_million_document_tokens": round(per_million, 3),
        "cost_vs_floor": round(cost / floor, 3),
        "input_tokens": stats["input_tokens"],
        "cache_write_tokens": stats["cache_write_tokens"],
        "cache_read_tokens": stats["cache_read_tokens"],
        "output_tokens": stats["output_tokens"],
        "fallbacks": sum(model.get("fallbacks", {}).values()),
        "chunks_lost": 0 if intact else "SOME",
        "busy_seconds": round(stats["busy_seconds"], 1),
    }


MODES: dict[str, dict[str, str]] = {
    "published": {"CONTEXT_MODE": "published", "CONTEXT_MEMORY_PREFIX": ""},
    "per_chunk": {"CONTEXT_MODE": "per_chunk"},
    "grouped": {"CONTEXT_MODE": "grouped"},
    "auto": {"CONTEXT_MODE": "auto"},
    "quota": {"CONTEXT_MODE": "per_chunk"},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--modes", default="published,per_chunk,grouped,auto,quota")
    parser.add_argument("--latency-ms", type=float, default=300.0)
    parser.add_argument("--per-token-ms", type=float, default=2.0)
    parser.add_argument("--rpm", type=int, default=1200, help="the stand-in's quota in the quota mode")
    parser.add_argument("--documents", type=int, default=0, help="only the first N documents (0: all)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    offline_environment(log_level="INFO")  # the handler's summary log line carries the accounting
    from contextual_kb.local.bedrock_standin import standin_subprocess

    documents = load_documents(args.dataset)
    if args.documents:
        documents = documents[: args.documents]
    corpus = corpus_figures(documents)
    print(
        f"{corpus['documents']} documents, {corpus['chunks']} chunks, {corpus['document_tokens']:,} document "
        f"tokens, {corpus['cacheable_documents']} cacheable by Haiku 4.5; stand-in {args.latency_ms:g} ms + "
        f"{args.per_token_ms:g} ms/token",
        flush=True,
    )
    rows = []
    for mode in args.modes.split(","):
        rpm = args.rpm if mode == "quota" else 0
        with standin_subprocess(args.latency_ms, args.per_token_ms, rpm) as url:
            elapsed, summary, intact = run_mode(documents, MODES[mode], url)
            stats = standin_stats(url)
        result = row(
            mode if not rpm else f"per_chunk, {rpm} RPM quota", elapsed, summary, stats, corpus, intact
        )
        if rpm:
            quota = rpm / 60 * stats["busy_seconds"]
            result["quota_used"] = round(stats["answered"] / quota, 3)
            # The stand-in's bucket starts full (one second of quota): without that burst, what pacing gave.
            result["quota_used_after_burst"] = round((stats["answered"] - rpm / 60) / quota, 3)
        rows.append(result)
        print(json.dumps(result), flush=True)

    base = next((r for r in rows if r["mode"] == "published"), None)
    print(
        "\n| mode | wall (s) | chunks/s | speed-up | calls | cache writes / cacheable doc | max writes per "
        "prefix | input read from cache | $ per M doc tokens | cost / floor | fallbacks | chunks lost |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        speed = f"{r['chunks_per_second'] / base['chunks_per_second']:.1f}x" if base else "-"
        print(
            f"| {r['mode']} | {r['seconds']} | {r['chunks_per_second']} | {speed} | {r['calls']} | "
            f"{r['cache_writes_per_cacheable_document']} | {r['max_writes_per_prefix']} | "
            f"{100 * r['cache_read_share']:.1f}% | {r['cost_per_million_document_tokens']:.3f} | "
            f"{r['cost_vs_floor']} | {r['fallbacks']} | {r['chunks_lost']} |"
        )
    for r in rows:
        if "quota_used" in r:
            print(f"\nquota mode: {r['calls']} calls answered, {r['throttled']} throttled, quota used "
                  f"{100 * r['quota_used']:.1f}% over {r['busy_seconds']} s "
                  f"({100 * r['quota_used_after_burst']:.1f}% without the initial burst)")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"corpus": corpus, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
