"""BM25 over raw versus contextualized chunks on the codebase benchmark (dev split).

Every chunk goes through the real Lambda handler (moto S3, in process): the corpus is staged as the KB
would stage it (one file per document, its chunks split over batch objects, source keys WITHOUT file
extensions since the dataset has no paths), the handler runs with each context strategy, and BM25 (bm25s,
k1=1.5, b=0.75) indexes the bodies it wrote. Pass@k compares chunks by their original text, as the
dataset README defines it.

    .venv/bin/python bench/bm25_contexts.py [--dataset ../shared/datasets/codebase] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from corpus import DEFAULT_DATASET, load_documents, offline_environment, stage_corpus  # bench/corpus.py

BUCKET = "bench-intermediate"
KS = (5, 10, 20)


def contextualized_corpus(documents: list[dict[str, Any]], strategy: str) -> dict[tuple[str, int], str]:
    """(doc uuid, chunk index) -> the body the handler wrote for that chunk."""
    import boto3
    from moto import mock_aws

    from contextual_kb import handler
    from contextual_kb.local.kb_staging import build_event
    from contextual_kb.local.lambda_context import LocalLambdaContext

    os.environ["CONTEXT_STRATEGY"] = strategy
    handler.runtime.cache_clear()
    bodies: dict[tuple[str, int], str] = {}
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        staged = stage_corpus(s3, BUCKET, documents)
        response = handler.lambda_handler(build_event(BUCKET, staged), LocalLambdaContext())
        for doc, produced in zip(documents, response["outputFiles"], strict=True):
            items = [
                item
                for ref in produced["contentBatches"]
                for item in json.loads(s3.get_object(Bucket=BUCKET, Key=ref["key"])["Body"].read())[
                    "fileContents"
                ]
            ]
            for chunk, item in zip(doc["chunks"], items, strict=True):
                bodies[(doc["original_uuid"], chunk["original_index"])] = item["contentBody"]
    handler.runtime.cache_clear()
    return bodies


def score(
    documents: list[dict[str, Any]],
    queries: list[dict[str, Any]],
    bodies: dict[tuple[str, int], str],
    analyzer: str,
) -> dict[int, float]:
    import bm25s

    from contextual_kb.evaluation import pass_at_k
    from contextual_kb.lexical import ANALYZERS

    tokenize = ANALYZERS[analyzer]
    ids = [(d["original_uuid"], c["original_index"]) for d in documents for c in d["chunks"]]
    original = {
        (d["original_uuid"], c["original_index"]): c["content"] for d in documents for c in d["chunks"]
    }
    retriever = bm25s.BM25(k1=1.5, b=0.75)
    retriever.index([tokenize(bodies[i]) for i in ids], show_progress=False)
    vocabulary = retriever.vocab_dict
    totals = dict.fromkeys(KS, 0.0)
    for query in queries:
        tokens = [t for t in tokenize(query["query"]) if t in vocabulary] or [next(iter(vocabulary))]
        found, _ = retriever.retrieve([tokens], k=max(KS), show_progress=False)
        retrieved = [original[ids[i]] for i in found[0]]
        golden = [original[(uuid, index)] for uuid, index in query["golden_chunk_uuids"]]
        for k in KS:
            totals[k] += pass_at_k(golden, retrieved, k)
    return {k: 100 * totals[k] / len(queries) for k in KS}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    offline_environment()
    documents = load_documents(args.dataset)
    queries = [
        json.loads(line) for line in (args.dataset / "evaluation_dev.jsonl").read_text().splitlines() if line
    ]
    chunk_count = sum(len(d["chunks"]) for d in documents)
    print(f"{len(documents)} documents, {chunk_count} chunks, {len(queries)} queries")

    rows = []
    for strategy in ("none", "structural"):
        started = time.perf_counter()
        bodies = contextualized_corpus(documents, strategy)
        elapsed = time.perf_counter() - started
        for analyzer in ("plain", "code-aware", "opensearch-builtin"):
            figures = score(documents, queries, bodies, analyzer)
            rows.append(
                {
                    "chunks": "raw" if strategy == "none" else strategy,
                    "analyzer": analyzer,
                    **{f"pass@{k}": round(v, 2) for k, v in figures.items()},
                    "handler_seconds": round(elapsed, 2),
                }
            )

    print("\n| chunks | tokens | Pass@5 | Pass@10 | Pass@20 | handler time (s) |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['chunks']} | {row['analyzer']} | {row['pass@5']:.2f} | {row['pass@10']:.2f} | "
            f"{row['pass@20']:.2f} | {row['handler_seconds']:.2f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
