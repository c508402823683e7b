"""Putting a context on a chunk. Pure.

``contentBody`` becomes context + a blank line + the original text, byte for byte; the context alone goes
into the chunk's metadata under a documented key, capped in bytes to the vector store's limit on a chunk's
custom metadata (``MetadataLimit``), which the user's metadata and ours share. The user's metadata always
wins: our keys only take the room it leaves (escapes counted), and the copy is left out when the user has a
key of the same name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contextual_kb.runtime.context.base import ChunkContext
from contextual_kb.runtime.models import ContentItem

BODY_SEPARATOR = "\n\n"
ELLIPSIS = "…"
# S3 Vectors' filterable metadata per vector (aws-facts.md); user metadata at or past it gets no copy.
METADATA_LIMIT_BYTES = 2048
# Left for the keys the KB adds itself (source URI, data source id, ...): our copy never takes it.
KB_RESERVE_BYTES = 512


@dataclass(frozen=True, slots=True)
class MetadataLimit:
    """What a chunk's custom metadata (the file's, the chunk's, ours) may hold once the KB merges it,
    counted as compact JSON in UTF-8: keys, values, quotes and separators (more than any store counts)."""

    max_bytes: int
    max_keys: int | None = None

    def fits(self, metadata: Mapping[str, Any]) -> bool:
        return _json_bytes(metadata) <= self.max_bytes and (
            self.max_keys is None or len(metadata) <= self.max_keys
        )


# A Knowledge Base on S3 Vectors: "up to 1 KB of custom metadata (including both filterable and
# non-filterable metadata) and 35 metadata keys per vector"; past them the ingestion job fails (aws-facts.md,
# "Vector stores and retrieval").
S3_VECTORS_LIMIT = MetadataLimit(max_bytes=1024, max_keys=35)
# Other stores (OpenSearch Serverless): S3 Vectors' 2 KB of filterable metadata less the KB's reserve, a
# budget that keeps chunks portable between stores.
DEFAULT_LIMIT = MetadataLimit(max_bytes=METADATA_LIMIT_BYTES - KB_RESERVE_BYTES)


def metadata_limit(vector_store: str) -> MetadataLimit:
    """The limit for the function's ``VECTOR_STORE`` (the stack's name for it, or the KB's storage type)."""
    normalized = vector_store.lower().replace("_", "").replace("-", "")
    return S3_VECTORS_LIMIT if normalized == "s3vectors" else DEFAULT_LIMIT


def add_within(
    metadata: Mapping[str, Any],
    ours: Mapping[str, Any],
    *,
    limit: MetadataLimit,
    file_metadata: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], bool]:
    """``metadata`` with each of ``ours`` (in their order) that fits ``limit`` beside the file's metadata and
    what came before it, and whether any was left out. The user's keys win: ours never replace them."""
    merged = dict(metadata)
    left_out = False
    for key, value in ours.items():
        if key in merged or (file_metadata and key in file_metadata):
            continue
        if limit.fits({**(file_metadata or {}), **merged, key: value}):
            merged[key] = value
        else:
            left_out = True
    return merged, left_out


_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_unicode(text: str) -> str:
    """``text`` with its lone surrogates (legal in JSON as ``\\ud83d``, not encodable as UTF-8) replaced by
    U+FFFD. Python joins a well-formed pair when it parses JSON: any surrogate left in a ``str`` is lone."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


@dataclass(frozen=True, slots=True)
class Enriched:
    item: ContentItem
    contextualized: bool
    metadata_truncated: bool = False


def enrich(
    item: ContentItem,
    context: ChunkContext | None,
    *,
    metadata_key: str,
    max_bytes: int,
    file_metadata: Mapping[str, Any] | None = None,
    limit: MetadataLimit = DEFAULT_LIMIT,
) -> Enriched:
    """The chunk with its context, or the chunk untouched when there is no context or it is not text.

    ``file_metadata`` counts towards the metadata limit: the KB merges it into every chunk's.
    ``metadata_truncated`` is set when the metadata copy was shortened or left out.
    """
    if context is None or not context.text or not item.is_text:
        return Enriched(item, contextualized=False)
    text = valid_unicode(context.text)  # a structural context quotes the document, which may hold any text
    fields = item.dump()
    fields["contentBody"] = text + BODY_SEPARATOR + item.content_body
    truncated = False
    if max_bytes > 0:
        user = {**(file_metadata or {}), **(item.content_metadata or {})}
        # Never overwrite the user's own value; nor take a key the store has no room for.
        no_key = limit.max_keys is not None and len(user) >= limit.max_keys
        if metadata_key in user or no_key:
            truncated = True
        else:
            budget = limit.max_bytes
            # Our key and value as they add to the JSON: `,"key":"value"`; escapes are counted below.
            overhead = _json_bytes({metadata_key: ""}) - 2 + (1 if user else 0)
            room = min(max_bytes, budget - _json_bytes(user) - overhead)
            value, truncated = cap_utf8(text, room)
            # Quotes, backslashes and control characters take more room escaped: cut again until it fits.
            while value and (excess := _json_bytes({**user, metadata_key: value}) - budget) > 0:
                room -= excess
                value, truncated = cap_utf8(text, room)
            if value and value != ELLIPSIS:
                fields["contentMetadata"] = {**(item.content_metadata or {}), metadata_key: value}
    return Enriched(ContentItem.model_validate(fields), contextualized=True, metadata_truncated=truncated)


def _json_bytes(value: Mapping[str, Any]) -> int:
    """Size of ``value`` as compact JSON in UTF-8 (lone surrogates from the event counted, not refused)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))


def cap_utf8(text: str, max_bytes: int) -> tuple[str, bool]:
    """``text`` cut to at most ``max_bytes`` of UTF-8 (on a character boundary, marked with an ellipsis)."""
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text, False
    room = max_bytes - len(ELLIPSIS.encode("utf-8"))
    if room <= 0:
        return "", True
    return encoded[:room].decode("utf-8", errors="ignore").rstrip() + ELLIPSIS, True
