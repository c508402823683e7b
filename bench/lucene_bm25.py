"""Lucene against the Python emulation of the deployed index's analysis (issue 26), codebase benchmark, dev
split: (1) every chunk body the handler writes (raw and with structural contexts) and every query analysed by
both, token lists compared; (2) Pass@k of Lucene's BM25 (a match query, as OpenSearch builds it) at
OpenSearch's k1=1.2 and at bm25s's k1=1.5 (b=0.75), beside bm25s with the Python tokens.

    make lucene && .venv/bin/python bench/lucene_bm25.py [--dataset FOLDER]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from corpus import DEFAULT_DATASET, load_dev_queries, load_documents, offline_environment  # bench/corpus.py

KS = (5, 10, 20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    args = parser.parse_args()
    offline_environment()
    from contextual_kb.evaluation import lucene
    from contextual_kb.evaluation.lexical import ANALYZERS
    from contextual_kb.evaluation.offline import bm25_rankings, contextualized_bodies, scored

    documents = load_documents(args.dataset)
    queries = load_dev_queries(args.dataset)
    ids = [(d["original_uuid"], c["original_index"]) for d in documents for c in d["chunks"]]
    print(f"Lucene {lucene.version()} ({lucene.OPENSEARCH_LUCENE})")
    print("| chunks | retrieval | Pass@5 | Pass@10 | Pass@20 |\n|---|---|---|---|---|")
    for strategy in ("none", "structural"):
        bodies, _ = contextualized_bodies(documents, strategy)
        texts = [bodies[i] for i in ids] + [q["query"] for q in queries]
        engine = lucene.analyze(texts)
        differ = sum(ANALYZERS["index"](t) != tokens for t, tokens in zip(texts, engine, strict=True))
        name = "raw" if strategy == "none" else strategy
        print(f"<!-- {name}: {differ} of {len(texts)} texts tokenized differently -->")
        runs = {"bm25s k1=1.5, Python tokens": bm25_rankings(documents, queries, bodies, "index", max(KS))}
        for k1 in (1.2, 1.5):
            rankings = lucene.rank_bm25(
                [bodies[i] for i in ids], [q["query"] for q in queries], max(KS), k1=k1
            )
            runs[f"Lucene k1={k1}"] = rankings
        for label, rankings in runs.items():
            figures = scored(documents, queries, rankings, KS).pass_at
            print(f"| {name} | {label} | " + " | ".join(f"{figures[k]:.2f}" for k in KS) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
