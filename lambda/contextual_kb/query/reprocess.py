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

What marking must not break:

- **Aurora (RDS) vector stores** need a column for each metadata attribute unless the Knowledge Base maps a
  custom metadata field ("Sync your data with your Amazon Bedrock knowledge base"; aws-facts.md): without one,
  ``ckb_reprocessed`` needs its column, which the attach deploy confirmed (``-c rdsMetadataColumns=true``), or
  nothing is marked (``check_store``).
- **The metadata file's own settings.** A PUT replaces an object's tags, user metadata, storage class and
  encryption with what the request carries: each is read from the file and written again (its tags only
  when it has some, which needs ``s3:GetObjectTagging``; a file whose tags cannot be read is not rewritten).
- **Archived documents** (GLACIER, DEEP_ARCHIVE, and Intelligent-Tiering's archive tiers) cannot be read
  without a restore: marked, they would fail on every sync. They are left alone and reported; GLACIER_IR is
  read directly and marked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

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
# Storage classes whose objects GetObject refuses (InvalidObjectState) until restored; GLACIER_IR is read
# directly. Intelligent-Tiering's opt-in archive tiers show only in HeadObject's ArchiveStatus.
ARCHIVED = frozenset({"GLACIER", "DEEP_ARCHIVE"})
TIERED = "INTELLIGENT_TIERING"
# What GetObject answers that PutObject takes back, so that a rewritten metadata file keeps its settings
# (SSE-C objects cannot be read here at all, and are skipped with S3's error).
CARRIED = (
    "Metadata",
    "StorageClass",
    "ServerSideEncryption",
    "SSEKMSKeyId",
    "BucketKeyEnabled",
    "ContentType",
    "CacheControl",
    "ContentDisposition",
    "ContentEncoding",
    "ContentLanguage",
    "Expires",
    "WebsiteRedirectLocation",
)


class UnsupportedError(Exception):
    """The data source's documents cannot be marked from here; the message says what to do."""


@dataclass(frozen=True, slots=True)
class Plan:
    bucket: str
    documents: list[tuple[str, int]]  # (key, bytes)
    prefixes: list[str]
    archived: list[tuple[str, str]] = field(default_factory=list)  # (key, storage class): left alone
    owner: str = ""  # the bucket's account when the data source names one (another account's bucket)

    @property
    def guard(self) -> dict[str, str]:
        """Every request's ExpectedBucketOwner: S3 refuses it if the bucket is no longer that account's."""
        return {"ExpectedBucketOwner": self.owner} if self.owner else {}

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
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (key, why): every document not marked
    errors: list[tuple[str, str]] = field(default_factory=list)  # those of them S3 refused (a retry may mark)

    @property
    def done(self) -> int:
        return self.created + self.updated


def check_store(knowledge_base: dict[str, Any], confirmed_columns: Iterable[str] = ()) -> None:
    """UnsupportedError when ``ckb_reprocessed`` cannot be written to the Knowledge Base's vector store: an
    Aurora (RDS) table with no custom metadata field, whose column for it the attach deploy did not confirm
    (``confirmed_columns``, the stack's RdsMetadataColumns output). Pure."""
    storage = knowledge_base.get("storageConfiguration") or {}
    if storage.get("type") != "RDS":
        return
    rds = storage.get("rdsConfiguration") or {}
    if (rds.get("fieldMapping") or {}).get("customMetadataField") or ATTRIBUTE in set(confirmed_columns):
        return
    raise UnsupportedError(
        f"knowledge base {knowledge_base.get('knowledgeBaseId', '?')} stores its vectors in Aurora table "
        f"{rds.get('tableName', '?')} with no custom metadata field, where every metadata attribute needs a "
        f"column: add a column {ATTRIBUTE} (text) to it, then deploy the attach stack with "
        "-c rdsMetadataColumns=true and run ckb sync --reprocess again"
    )


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
    """Every document of the data source under ``prefix`` (metadata files and folder markers left out), the
    archived ones apart."""
    bucket, prefixes = scope(data_source, prefix)
    owner = str(
        ((data_source.get("dataSourceConfiguration") or {}).get("s3Configuration") or {}).get(
            "bucketOwnerAccountId"
        )
        or ""
    )
    guard = {"ExpectedBucketOwner": owner} if owner else {}
    documents: dict[str, int] = {}
    archived: dict[str, str] = {}
    tiered: list[str] = []
    for each in prefixes:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=each, **guard):
            for item in page.get("Contents", []):
                key = item["Key"]
                if key.endswith(METADATA_SUFFIX) or key.endswith("/"):
                    continue
                storage_class = str(item.get("StorageClass") or "STANDARD")
                if storage_class in ARCHIVED:
                    archived[key] = storage_class
                    continue
                if storage_class == TIERED:
                    tiered.append(key)
                documents[key] = int(item.get("Size", 0))
    for key, status in _archive_statuses(s3, bucket, tiered, guard):
        if status:
            archived[key] = f"{TIERED} {status}"
            documents.pop(key, None)
    return Plan(bucket, sorted(documents.items()), prefixes, sorted(archived.items()), owner)


def _archive_statuses(s3: Any, bucket: str, keys: list[str], guard: dict[str, str]) -> list[tuple[str, str]]:
    """(key, ArchiveStatus or "") of Intelligent-Tiering objects, by HeadObject, ``WORKERS`` at a time. A HEAD
    that fails says nothing here: marking reads the metadata file, not the document."""

    def status(key: str) -> tuple[str, str]:
        try:
            return key, str(s3.head_object(Bucket=bucket, Key=key, **guard).get("ArchiveStatus") or "")
        except (ClientError, BotoCoreError):
            return key, ""

    if not keys:
        return []
    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="ckb-head") as pool:
        return list(pool.map(status, keys))


# PutObject's answers when the object changed since it was read (412), a concurrent write won (409), or it
# was deleted since (If-Match on a missing object: 404).
CHANGED_MEANWHILE = {"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"}


class _NotMarkedError(Exception):
    """This document's metadata file cannot be rewritten with all it has (its tags unreadable): why."""


def carried(got: dict[str, Any]) -> dict[str, Any]:
    """PutObject's arguments that keep what GetObject answered of the object's own settings (user metadata,
    storage class, encryption and its KMS key, content headers). Pure."""
    kept = {name: got[name] for name in CARRIED if got.get(name) not in (None, "", {})}
    if kept.get("ServerSideEncryption") != "aws:kms" and kept.get("ServerSideEncryption") != "aws:kms:dsse":
        kept.pop("SSEKMSKeyId", None)
        kept.pop("BucketKeyEnabled", None)
    return kept


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
            extra: dict[str, Any]  # the condition, and the settings carried over
            try:
                got = s3.get_object(Bucket=plan_.bucket, Key=sidecar, **plan_.guard)
                existing: bytes | None = got["Body"].read()
                extra = {"IfMatch": got["ETag"], **carried(got)}
                if int(got.get("TagCount") or 0):
                    extra["Tagging"] = _tags(s3, plan_, sidecar, got)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in {"NoSuchKey", "404"}:
                    raise
                existing, extra = None, {"IfNoneMatch": "*", "ContentType": "application/json"}
            body, why = marked_metadata(existing, stamp)
            if body is None:
                return "skipped", why
            if plan_.owner:
                # Another account's bucket: the file stays the bucket owner's (where ACLs are enabled and
                # objects belong to their writer, the Knowledge Base could not read it otherwise).
                extra["ACL"] = "bucket-owner-full-control"
            s3.put_object(Bucket=plan_.bucket, Key=sidecar, Body=body, **extra, **plan_.guard)
            return ("created" if existing is None else "updated"), ""
        except _NotMarkedError as exc:
            return "error", str(exc)
        except (ClientError, BotoCoreError) as exc:
            code = exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else ""
            if code in CHANGED_MEANWHILE:
                return "error", "its metadata file changed while it was being marked: run again"
            if code == "InvalidObjectState":
                return (
                    "skipped",
                    "its metadata file is archived: restore it (or change its storage class) first",
                )
            return "error", f"S3 {code or exc}"

    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="ckb-mark") as pool:
        for (key, _), (outcome, why) in zip(plan_.documents, pool.map(one, _keys(plan_)), strict=True):
            if outcome in ("skipped", "error"):
                result.skipped.append((key, why))
                if outcome == "error":
                    result.errors.append((key, why))
            elif outcome == "created":
                result.created += 1
            else:
                result.updated += 1
            if progress is not None:
                progress(1)
    return result


def _tags(s3: Any, plan_: Plan, key: str, got: dict[str, Any]) -> str:
    """The object's tags as PutObject's Tagging takes them (URL-encoded), read at the version read."""
    version = {"VersionId": got["VersionId"]} if got.get("VersionId") else {}
    try:
        tags = s3.get_object_tagging(Bucket=plan_.bucket, Key=key, **version, **plan_.guard)["TagSet"]
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        raise _NotMarkedError(
            f"S3 {code} reading its metadata file's tags (s3:GetObjectTagging): not rewritten without them"
        ) from None
    # Percent-encoded (a space as %20, never "+"), as S3 reads the x-amz-tagging header
    return urlencode([(tag["Key"], tag["Value"]) for tag in tags], quote_via=quote)


def _keys(plan_: Plan) -> Iterator[str]:
    return (key for key, _ in plan_.documents)
