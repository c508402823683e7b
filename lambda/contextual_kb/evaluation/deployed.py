"""``ckb eval`` against a deployed Knowledge Base: upload the corpus, sync, query every question, score.

Resumable and idempotent: a document already in the source bucket with the same content is not uploaded
again, and each query's results are kept in a state file (JSON lines) so a rerun queries only what is
missing. The KB chunks the corpus its own way, so a golden chunk counts as found in a retrieved chunk when
most of it lies there (``evaluation.mostly_within``), not by exact text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from contextual_kb.evaluation.metrics import Scores, mostly_within, score
from contextual_kb.query.retrieval import Retriever

PREFIX = "ckb-eval/"


def document_key(document: dict[str, Any], prefix: str = PREFIX) -> str:
    name = str(document.get("doc_id") or document["original_uuid"]).replace("/", "_")
    return f"{prefix}{name}.txt"


def upload_corpus(s3: Any, bucket: str, documents: Sequence[dict[str, Any]], prefix: str = PREFIX) -> int:
    """Put each document as a text object unless the same content is already there; the number put."""
    uploaded = 0
    for document in documents:
        body = document["content"].encode("utf-8")
        key = document_key(document, prefix)
        try:
            etag = s3.head_object(Bucket=bucket, Key=key)["ETag"].strip('"')
        except ClientError:
            etag = ""
        if etag == hashlib.md5(body).hexdigest():
            continue
        s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="text/plain")
        uploaded += 1
    return uploaded


def run_queries(
    retriever: Retriever,
    queries: Sequence[dict[str, Any]],
    depth: int,
    state: Path,
    label: str,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, list[str]]:
    """query -> retrieved chunk texts (original, context removed), from the state file or the KB."""
    known: dict[str, list[str]] = {}
    if state.exists():
        for line in state.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("label") == label and entry.get("depth", 0) >= depth:
                known[entry["query"]] = entry["retrieved"]
    with state.open("a") as out:
        for number, query in enumerate(queries, 1):
            text = query["query"]
            if text in known:
                continue
            progress(f"{label}: query {number:,} of {len(queries):,}")
            results = retriever.search(text, k=depth)
            known[text] = [r.text for r in results]
            out.write(
                json.dumps({"label": label, "depth": depth, "query": text, "retrieved": known[text]}) + "\n"
            )
            out.flush()  # a rerun after an interruption starts where this one stopped
    return known


def score_deployed(
    documents: Sequence[dict[str, Any]],
    queries: Sequence[dict[str, Any]],
    retrieved: dict[str, list[str]],
    ks: Sequence[int],
) -> Scores:
    original = {
        (d["original_uuid"], c["original_index"]): c["content"] for d in documents for c in d["chunks"]
    }
    runs = [
        ([original[(uuid, index)] for uuid, index in q["golden_chunk_uuids"]], retrieved[q["query"]])
        for q in queries
    ]
    return score(runs, ks, match=mostly_within)
