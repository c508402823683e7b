"""``ckb eval`` against a deployed Knowledge Base: upload the corpus, sync, query every question, score.

Resumable and idempotent: a document already in the source bucket with the same content is not uploaded
again, and each query's results are kept in a state file (JSON lines) so a rerun queries only what is
missing. A line cut off by a kill or a full disk, or otherwise unreadable, is skipped and counted (its query
is asked again); the entries are keyed by the Knowledge Base, the search, the corpus and the function's
settings, so a changed corpus or strategy is queried afresh. The KB chunks the corpus its own way, so a
golden chunk counts as found in a retrieved chunk when most of it lies there (``evaluation.mostly_within``),
not by exact text.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from contextual_kb.evaluation.metrics import Scores, mostly_within, score
from contextual_kb.evaluation.naming import PREFIX, document_key, document_keys
from contextual_kb.query.retrieval import Retriever


def upload_corpus(s3: Any, bucket: str, documents: Sequence[dict[str, Any]], prefix: str = PREFIX) -> int:
    """Put each document as a text object (``naming.document_key``) unless the same content is already
    there; the number put. Names that would merge two documents are refused before anything is put."""
    uploaded = 0
    for document, key in zip(documents, document_keys(documents, prefix), strict=True):
        body = document["content"].encode("utf-8")
        try:
            etag = s3.head_object(Bucket=bucket, Key=key)["ETag"].strip('"')
        except ClientError:
            etag = ""
        if etag == hashlib.md5(body).hexdigest():
            continue
        s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="text/plain")
        uploaded += 1
    return uploaded


def corpus_digest(documents: Sequence[dict[str, Any]], prefix: str = PREFIX) -> str:
    """What the Knowledge Base is given of the corpus (each object's key and text), as a short digest: a
    state file's results hold for this corpus only. Pure."""
    digest = hashlib.sha256()
    for document in documents:
        for part in (document_key(document, prefix), document["content"]):
            encoded = part.encode("utf-8")
            digest.update(len(encoded).to_bytes(8, "big") + encoded)
    return digest.hexdigest()[:16]


@dataclass
class State:
    """What a state file held for one label: the retrieved texts by query, and the line numbers skipped
    (cut off by a kill or a full disk, not UTF-8, not a JSON object, or not a well-formed entry)."""

    known: dict[str, list[str]] = field(default_factory=dict)
    bad_lines: list[int] = field(default_factory=list)


def read_state(state: Path, label: str, depth: int) -> State:
    """The entries of ``label`` at least ``depth`` deep; a bad line is skipped and counted, never fatal and
    never scored (its query is asked again)."""
    found = State()
    if not state.exists():
        return found
    for number, raw in enumerate(state.read_bytes().split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            found.bad_lines.append(number)
            continue
        if not _well_formed(entry):
            found.bad_lines.append(number)
            continue
        if entry["label"] == label and entry["depth"] >= depth:
            found.known[entry["query"]] = entry["retrieved"]
    return found


def _well_formed(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("label"), str)
        and type(entry.get("depth")) is int
        and entry["depth"] >= 1
        and isinstance(entry.get("query"), str)
        and isinstance(entry.get("retrieved"), list)
        and len(entry["retrieved"]) <= entry["depth"]
        and all(isinstance(text, str) for text in entry["retrieved"])
    )


def run_queries(
    retriever: Retriever,
    queries: Sequence[dict[str, Any]],
    depth: int,
    state: Path,
    label: str,
    progress: Callable[[str], None] = lambda _: None,
    bad_lines: Callable[[list[int]], None] = lambda _: None,
) -> dict[str, list[str]]:
    """query -> retrieved chunk texts (original, context removed), from the state file or the KB; the
    state file's bad line numbers go to ``bad_lines`` (when there are any)."""
    found = read_state(state, label, depth)
    if found.bad_lines:
        bad_lines(found.bad_lines)
    known = found.known
    ends_cut = False
    if state.exists() and state.stat().st_size > 0:
        with state.open("rb") as tail:
            tail.seek(-1, os.SEEK_END)
            ends_cut = tail.read(1) != b"\n"
    with state.open("a", encoding="utf-8") as out:
        if ends_cut:  # a line cut off by a kill: the next entry starts a line of its own
            out.write("\n")
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
