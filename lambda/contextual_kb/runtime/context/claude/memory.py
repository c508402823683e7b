"""Remembered contexts: the only module that reads and writes them (S3, a prefix of the intermediate bucket).

One object per document: its key is a hash of the prompt fingerprint (model, prompt version, template,
glossary, mode) and the document's text; inside, each context is keyed by its chunk's *place*: a hash of the
chunk's text and where it starts in the rebuilt document. So a context is found again exactly when model,
prompt, document and chunk are all unchanged, and two identical chunks at different places (a repeated
table, a page header) each keep their own: a retried call or a re-sync of unchanged documents makes no
model call for them. Memory is an optimisation: a failure to read or write it is counted and logged, never
fatal.

Two calls of the same document may run at once (the Knowledge Base may call again: aws-facts.md): a save
is conditional on the object being as this call read it (``If-Match`` its ETag, ``If-None-Match: *`` when
there was none); when another call wrote it since, the save reads it again and merges (its contexts kept,
ours over them where both have one), so a call that learned less never erases what another remembered.

Format 1 (until 2026-11) keyed contexts by the chunk's text alone. Such an object is still read, for the
chunks whose text occurs once in their document (where the key is unambiguous); the next write of that
document's contexts stores them in format 2, by place. Nothing else is needed to migrate.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from contextual_kb.runtime.errors import StorageError
from contextual_kb.runtime.hashing import sha256_hex
from contextual_kb.runtime.storage import S3_CONFIG

FORMAT_VERSION = 2
LEGACY_VERSION = 1
# Conditional writes tried before a last unconditional one (each lost race reads the object again).
SAVE_ATTEMPTS = 3
_CHANGED = {"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"}


def chunk_key(chunk: str) -> str:
    """Format 1's key: the chunk's text alone."""
    return hashlib.sha256(chunk.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def place_key(chunk: str, start: int) -> str:
    """Format 2's key: the chunk's text and its start in the rebuilt document."""
    digest = hashlib.sha256(f"{start}\x00".encode())
    digest.update(chunk.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:32]


def document_key(prefix: str, fingerprint: str, document: str) -> str:
    hexdigest = sha256_hex(document, prefix=f"{fingerprint}\x00".encode())
    return f"{prefix}{fingerprint}/{hexdigest[:2]}/{hexdigest}.json"


@dataclass(frozen=True, slots=True)
class Remembered:
    """A document's remembered contexts as read: by place, and (from a format-1 object) by text alone."""

    by_place: Mapping[str, str] = field(default_factory=dict)
    by_text: Mapping[str, str] = field(default_factory=dict)
    etag: str = ""  # of the object read ("" when there was none): a save writes only over that version

    def get(self, chunk: str, start: int, *, unique: bool) -> str | None:
        """The context of the chunk at ``start``; a format-1 entry only if the chunk's text is ``unique`` in
        its document (else it may be another place's context)."""
        found = self.by_place.get(place_key(chunk, start))
        if found is None and unique and self.by_text:
            found = self.by_text.get(chunk_key(chunk))
        return found

    def __bool__(self) -> bool:
        return bool(self.by_place or self.by_text)

    def migrated(self, chunks: Sequence[tuple[str, int]]) -> dict[str, str]:
        """Everything remembered, by place: format-2 entries as they are, format-1 ones moved to the place of
        the chunk they name among ``chunks`` (text, start) where its text is unique (the next save writes
        them in format 2: the migration)."""
        entries = dict(self.by_place)
        if self.by_text:
            counts = Counter(chunk for chunk, _ in chunks)
            for chunk, start in chunks:
                known = self.get(chunk, start, unique=True) if counts[chunk] == 1 else None
                if known:
                    entries.setdefault(place_key(chunk, start), known)
        return entries


class ContextMemory:
    def __init__(self, client: Any = None) -> None:
        self.client = client or boto3.client("s3", config=S3_CONFIG)  # shared with the pending records

    def load(self, bucket: str, key: str) -> Remembered:
        found, etag = self._read(bucket, key)
        if found is None:
            return Remembered(etag=etag)  # missing, or not ours: as if nothing were remembered
        version, valid = found
        if version == FORMAT_VERSION:
            return Remembered(by_place=valid, etag=etag)
        return Remembered(by_text=valid, etag=etag)

    def _read(self, bucket: str, key: str) -> tuple[tuple[int, dict[str, str]] | None, str]:
        """((format version, its valid entries) or None, the object's ETag or "" when it is missing)."""
        try:
            response = self.client.get_object(Bucket=bucket, Key=key)
            data = json.loads(response["Body"].read())
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "Unknown")
            if code in {"NoSuchKey", "404", "NotFound"}:
                return None, ""
            raise StorageError(f"s3://{bucket}/{key}: cannot read remembered contexts ({code})") from exc
        except (BotoCoreError, ValueError) as exc:
            raise StorageError(f"s3://{bucket}/{key}: cannot read remembered contexts ({exc})") from exc
        etag = str(response.get("ETag", ""))
        if not isinstance(data, dict) or data.get("version") not in {FORMAT_VERSION, LEGACY_VERSION}:
            return None, etag
        contexts = data.get("contexts")
        if not isinstance(contexts, dict):
            return None, etag
        valid = {k: v for k, v in contexts.items() if isinstance(k, str) and isinstance(v, str) and v}
        return (int(data["version"]), valid), etag

    def save(
        self, bucket: str, key: str, contexts: Mapping[str, str], *, read: Remembered | None = None
    ) -> None:
        """``contexts`` by place key (format 2), written over the version ``read`` (what this call loaded;
        None: read it now). Another call's write since then is read and merged (module docstring)."""
        entries = dict(contexts)
        if read is None:
            found, etag = self._read(bucket, key)
            entries = {**(found[1] if found and found[0] == FORMAT_VERSION else {}), **entries}
        else:
            etag = read.etag
        for _ in range(SAVE_ATTEMPTS):
            condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
            if self._put(bucket, key, entries, condition):
                return
            found, etag = self._read(bucket, key)  # another call wrote it: its contexts, ours over them
            entries = {**(found[1] if found and found[0] == FORMAT_VERSION else {}), **dict(contexts)}
        self._put(bucket, key, entries, {})  # still racing: the last write stands, as before

    def _put(self, bucket: str, key: str, entries: Mapping[str, str], condition: dict[str, str]) -> bool:
        """Write; False when the condition did not hold (another call wrote the object since)."""
        body = json.dumps({"version": FORMAT_VERSION, "contexts": dict(entries)}, ensure_ascii=False)
        try:
            self.client.put_object(
                Bucket=bucket,
                Key=key,
                Body=body.encode("utf-8"),
                ContentType="application/json",
                **condition,
            )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "Unknown")
            if condition and code in _CHANGED:
                return False
            raise StorageError(f"s3://{bucket}/{key}: cannot write remembered contexts ({code})") from exc
        except BotoCoreError as exc:
            raise StorageError(f"s3://{bucket}/{key}: cannot write remembered contexts ({exc})") from exc
        return True
