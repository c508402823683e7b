"""Pending documents: what left the Lambda without a model context, kept for ``ckb contextualize``.

Whenever a chunk leaves with the structural context instead of the model's (deadline, throttling, model
errors; or every chunk, with ``CONTEXT_DEFER=always``), its document is recorded in the intermediate bucket
under ``PENDING_PREFIX``, keyed like the remembered contexts (a hash of the prompt fingerprint and the
document's text) and by its source: a retried call or a re-sync overwrites the same record (idempotent), a
changed document gets its own, and so does each source of one text (a copied README, a LICENSE, vendored
code): each source is re-ingested, and each record dropped, on its own, while they share the contexts.
The record holds what is needed to make the missing contexts later, the same way the Lambda would, and to
store them exactly where the Lambda reads them: the rebuilt text, every chunk's span, the chunks still
without a model context and why, the remembered-contexts key, the prompt settings, the source and the KB's
ids. ``ckb contextualize`` reads, updates and deletes the records.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from contextual_kb.runtime.hashing import sha256_hex

VERSION = 1


class PromptSnapshot(BaseModel):
    """The settings that shape a context (those of the function that recorded the document)."""

    model_config = ConfigDict(frozen=True)

    model_id: str
    instruction: str = ""
    glossary: str = ""
    context_max_tokens: int = 160
    context_max_chars: int = 800
    max_document_tokens: int = 100_000
    window_tokens: int = 16_000
    opening_tokens: int = 2000


class PendingDocument(BaseModel):
    model_config = ConfigDict(frozen=True)

    version: int = VERSION
    memory_key: str  # where the Lambda reads this document's remembered contexts
    fingerprint: str
    text_sha256: str  # of ``text``: a record whose text no longer hashes to it is not used
    text: str
    spans: list[tuple[int, int]]  # every chunk's [start, end) in ``text``, in order
    pending: list[int]  # indices of the chunks without a model context
    reasons: dict[str, int] = Field(default_factory=dict)  # why, counted
    source: str = ""  # the original file's URI
    path: str | None = None
    knowledge_base_id: str = ""
    data_source_id: str = ""
    ingestion_job_id: str = ""
    recorded_at: str = ""  # ISO 8601, UTC
    prompt: PromptSnapshot
    # Set by ``ckb contextualize`` (its run) once contexts were made for the document and until it is marked
    # for re-ingestion: the record is kept, so that a document that could not be marked is not forgotten.
    # The function never sets it: a record it writes again (a re-sync) is pending as it says.
    awaiting_reingestion: str = ""

    def chunk(self, index: int) -> str:
        start, end = self.spans[index]
        return self.text[start:end]

    def intact(self) -> bool:
        """The text still hashes to what was recorded (a record changed or truncated in S3 is not used)."""
        return text_hash(self.text) == self.text_sha256

    def dump(self) -> bytes:
        """JSON in UTF-8; a text holding a lone surrogate (legal in JSON) is written ASCII-escaped."""
        fields = self.model_dump(mode="python")
        try:
            return json.dumps(fields, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(fields).encode("ascii")

    @classmethod
    def parse(cls, body: bytes) -> PendingDocument:
        return cls.model_validate(json.loads(body))


def pending_key(prefix: str, memory_key: str, memory_prefix: str, source: str) -> str:
    """The record's key: the document's remembered-contexts key (its digest, already computed) moved from
    the remembered contexts' prefix to the pending prefix, then a hash of the source's URI (records written
    before sources were keyed lack it: they are read the same way)."""
    return (
        prefix
        + memory_key.removeprefix(memory_prefix).removesuffix(".json")
        + f"/{sha256_hex(source)[:32]}.json"
    )


def text_hash(text: str) -> str:
    return sha256_hex(text)


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def record(
    *,
    memory_key: str,
    fingerprint: str,
    text: str,
    spans: list[tuple[int, int]],
    pending: Mapping[int, str],
    prompt: PromptSnapshot,
    source: str,
    path: str | None,
    ids: Mapping[str, str],
) -> PendingDocument:
    reasons: dict[str, int] = {}
    for reason in pending.values():
        reasons[reason] = reasons.get(reason, 0) + 1
    return PendingDocument(
        memory_key=memory_key,
        fingerprint=fingerprint,
        text_sha256=text_hash(text),
        text=text,
        spans=spans,
        pending=sorted(pending),
        reasons=reasons,
        source=source,
        path=path,
        knowledge_base_id=ids.get("knowledge_base_id", ""),
        data_source_id=ids.get("data_source_id", ""),
        ingestion_job_id=ids.get("ingestion_job_id", ""),
        recorded_at=now_iso(),
        prompt=prompt,
    )


class PendingStore:
    """Writes pending records (S3). The Lambda only writes; ``ckb contextualize`` reads and deletes."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def save(self, bucket: str, key: str, document: PendingDocument) -> bool:
        """Write the record; True when it is new. One already there (the same document recorded by a retried
        or concurrent call of the same event, or by a re-sync before ``ckb contextualize``) is replaced by
        this one and answers False, so that ``DocumentsPending`` counts each record once. S3 creates an
        object under ``If-None-Match: *`` only when none exists, the first of concurrent writes winning
        (conditional-writes.html); 409 is a concurrent conditional write still under way."""
        from botocore.exceptions import BotoCoreError, ClientError

        from contextual_kb.runtime.errors import StorageError

        body = document.dump()
        for condition in ({"IfNoneMatch": "*"}, {}):
            try:
                self._client.put_object(
                    Bucket=bucket, Key=key, Body=body, ContentType="application/json", **condition
                )
                return bool(condition)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "Unknown")
                if condition and code in {"PreconditionFailed", "ConditionalRequestConflict"}:
                    continue  # there already: written again, unconditionally, and not counted
                raise StorageError(f"s3://{bucket}/{key}: cannot record a pending document ({code})") from exc
            except BotoCoreError as exc:
                raise StorageError(f"s3://{bucket}/{key}: cannot record a pending document ({exc})") from exc
        return False
