"""``ckb sync --reprocess``: make the Knowledge Base run its transformation again on documents it has already
ingested (after attaching it to an existing Knowledge Base, or changing its settings).

A sync is incremental: "Amazon Bedrock processes only the documents that were added, modified, or deleted
since the last sync" (kb-data-source-sync-ingest), so a new transformation changes nothing already indexed.
Two ways were weighed:

- **Direct ingestion** (``IngestKnowledgeBaseDocuments``) is not used. AWS's pages say its documents are
  "directly indexed into the vector store" and "skip the step of adding documents into the data source"
  (kb-direct-ingestion); none says that the data source's parsing, chunking or custom transformation runs
  for them, so it cannot be relied on to give the documents contexts.
- **A metadata change** is documented to re-ingest a document in full: "Content or metadata changed | The
  document is re-ingested (re-parsed, re-chunked, re-embedded, and re-indexed)"; and the shortcut that only
  updates metadata applies only when "the data source does not use a custom transformation Lambda
  function" (kb-data-source-sync-ingest). So each document's ``<key>.metadata.json`` gets one attribute,
  ``ckb_reprocessed``, set to this run's time (created when there is none; the user's attributes kept as
  they were, in their format), and the next ingestion job re-ingests it.

S3 data sources only: their documents are objects we can mark. Other data source types re-ingest what their
source reports changed; ``UnsupportedError`` says what to do, in one line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

ATTRIBUTE = "ckb_reprocessed"
METADATA_SUFFIX = ".metadata.json"
# A metadata file is at most 10 KB (knowledge-base-ds.html, metadata files).
METADATA_MAX_BYTES = 10 * 1024
WORKERS = 16
# Measured on the codebase corpus with Haiku 4.5 list prices (docs/BENCHMARKS.md, "Contextualizing with
# Claude"): USD per million document tokens, grouped mode and per-chunk mode.
CONTEXT_USD_PER_MILLION_TOKENS = (3.45, 12.34)
BYTES_PER_TOKEN = 4  # plain text, roughly; parsed formats (PDF, Office) differ


class UnsupportedError(Exception):
    """The data source's documents cannot be marked from here; the message says what to do."""


@dataclass(frozen=True, slots=True)
class Plan:
    bucket: str
    documents: list[tuple[str, int]]  # (key, bytes)
    prefixes: list[str]

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.documents)

    def estimated_usd(self) -> tuple[float, float]:
        """The contexts' cost of re-ingesting, if the documents are plain text (grouped, per-chunk)."""
        tokens = self.total_bytes / BYTES_PER_TOKEN
        low, high = CONTEXT_USD_PER_MILLION_TOKENS
        return tokens * low / 1e6, tokens * high / 1e6


@dataclass
class Marked:
    created: int = 0  # metadata files made
    updated: int = 0  # metadata files that had the user's attributes, kept
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (key, why)


def scope(data_source: dict[str, Any], prefix: str) -> tuple[str, list[str]]:
    """The S3 bucket and the key prefixes to reprocess: the data source's inclusion prefixes, narrowed to
    ``prefix`` (a prefix outside them reprocesses nothing, since the KB would not ingest it). Pure."""
    configuration = data_source.get("dataSourceConfiguration") or {}
    kind = configuration.get("type", "")
    if kind != "S3":
        raise UnsupportedError(
            f"data source {data_source.get('dataSourceId')} is of type {kind}: --reprocess marks S3 "
            "documents only; for this type, change the documents at their source (or make a new data source "
            "with the same configuration, which ingests everything) and sync"
        )
    bucket = str(configuration.get("s3Configuration", {}).get("bucketArn", "")).rsplit(":", 1)[-1]
    included = list(configuration.get("s3Configuration", {}).get("inclusionPrefixes") or [""])
    if not prefix:
        return bucket, included
    narrowed = [
        prefix if prefix.startswith(p) else p
        for p in included
        if prefix.startswith(p) or p.startswith(prefix)
    ]
    return bucket, sorted(set(narrowed))


def plan(s3: Any, data_source: dict[str, Any], prefix: str = "") -> Plan:
    """Every document of the data source under ``prefix`` (metadata files and folder markers left out)."""
    bucket, prefixes = scope(data_source, prefix)
    documents: dict[str, int] = {}
    for each in prefixes:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=each):
            for item in page.get("Contents", []):
                key = item["Key"]
                if key.endswith(METADATA_SUFFIX) or key.endswith("/"):
                    continue
                documents[key] = int(item.get("Size", 0))
    return Plan(bucket, sorted(documents.items()), prefixes)


# PutObject's answers when the object changed since it was read (412), a concurrent write won (409), or it
# was deleted since (If-Match on a missing object: 404).
CHANGED_MEANWHILE = {"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"}


def marked_metadata(existing: bytes | None, stamp: str) -> tuple[bytes | None, str]:
    """The metadata file with ``ckb_reprocessed`` set to ``stamp``, and "" (or None and why not). Pure.

    The user's attributes are kept as they are; ours takes their format (plain values, or typed ones with
    ``includeForEmbedding`` false, so the stamp is never embedded)."""
    if existing is None:
        document: dict[str, Any] = {"metadataAttributes": {}}
    else:
        try:
            document = json.loads(existing)
        except ValueError:
            return None, "its metadata file is not JSON (the Knowledge Base cannot read it either)"
        if not isinstance(document, dict) or not isinstance(document.get("metadataAttributes", {}), dict):
            return None, "its metadata file has no metadataAttributes object"
    attributes = document.setdefault("metadataAttributes", {})
    typed = any(isinstance(v, dict) and "value" in v for v in attributes.values())
    attributes[ATTRIBUTE] = (
        {"value": {"type": "STRING", "stringValue": stamp}, "includeForEmbedding": False} if typed else stamp
    )
    body = json.dumps(document, ensure_ascii=False, indent=2).encode("utf-8")
    if len(body) > METADATA_MAX_BYTES:
        return None, f"its metadata file would pass the {METADATA_MAX_BYTES:,}-byte limit"
    return body, ""


def mark(s3: Any, plan_: Plan, stamp: str, *, progress: Callable[[int], None] | None = None) -> Marked:
    """Each document's metadata file marked, ``WORKERS`` at a time. A document that cannot be marked is
    skipped with its reason (it keeps its old chunks); an S3 error on one is that document's alone."""
    result = Marked()

    def one(key: str) -> tuple[str, str]:
        sidecar = key + METADATA_SUFFIX
        try:
            # Written only over the version read (S3 conditional writes): a metadata file someone changes
            # meanwhile is never overwritten with the older attributes.
            condition: dict[str, str]
            try:
                got = s3.get_object(Bucket=plan_.bucket, Key=sidecar)
                existing: bytes | None = got["Body"].read()
                condition = {"IfMatch": got["ETag"]}
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in {"NoSuchKey", "404"}:
                    raise
                existing, condition = None, {"IfNoneMatch": "*"}
            body, why = marked_metadata(existing, stamp)
            if body is None:
                return "skipped", why
            s3.put_object(
                Bucket=plan_.bucket, Key=sidecar, Body=body, ContentType="application/json", **condition
            )
            return ("created" if existing is None else "updated"), ""
        except (ClientError, BotoCoreError) as exc:
            code = exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else ""
            if code in CHANGED_MEANWHILE:
                return "skipped", "its metadata file changed while it was being marked: run again"
            return "skipped", f"S3 {code or exc}"

    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="ckb-mark") as pool:
        for (key, _), (outcome, why) in zip(plan_.documents, pool.map(one, _keys(plan_)), strict=True):
            if outcome == "skipped":
                result.skipped.append((key, why))
            elif outcome == "created":
                result.created += 1
            else:
                result.updated += 1
            if progress is not None:
                progress(1)
    return result


def _keys(plan_: Plan) -> Iterator[str]:
    return (key for key, _ in plan_.documents)
