"""BM25 over raw versus contextualized chunks on the codebase benchmark (dev split).

Every chunk goes through the real Lambda handler (moto S3, in process): the corpus is staged as the KB
would stage it (one file per document, its chunks split over batch objects, each under the key ``ckb eval
--stack`` uploads it as, ``ckb-eval/doc_1.txt``: the dataset has no paths and ``.txt`` names no kind, so code
is recognised from its text), the handler runs with each context strategy, and BM25 (bm25s,
k1=1.5, b=0.75) indexes the bodies it wrote. Pass@k compares chunks by their original text, as the
dataset README defines it.

    .venv/bin/python bench/bm25_contexts.py [--dataset FOLDER] [--json out.json]

The same code serves ``ckb eval --local`` (contextual_kb/evaluation/offline.py), which adds Recall@k and MRR.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from corpus import DEFAULT_DATASET, load_dev_queries, load_documents, offline_environment  # bench/corpus.py

KS = (5, 10, 20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    offline_environment()
    from contextual_kb.evaluation.offline import bm25_scores, contextualized_bodies

    documents = load_documents(args.dataset)
    queries = load_dev_queries(args.dataset)
    chunk_count = sum(len(d["chunks"]) for d in documents)
    print(f"{len(documents)} documents, {chunk_count} chunks, {len(queries)} queries")

    rows = []
    for strategy in ("none", "structural"):
        started = time.perf_counter()
        bodies, _ = contextualized_bodies(documents, strategy)
        elapsed = time.perf_counter() - started
        for analyzer in ("plain", "code-aware", "opensearch-builtin"):
            figures = bm25_scores(documents, queries, bodies, analyzer, KS).pass_at
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
