"""The one name an evaluation document goes by: the object key ``ckb eval --stack`` uploads it as, which
``ckb eval --local`` stages it under too. The handler reads the document's path from that key (the
structural context writes it into every chunk's context), so both paths give the handler the same text.

A document is named by its ``doc_id``, else its ``original_uuid`` (a corpus may have no ``doc_id``), with
``/`` as ``_`` (one flat prefix) and ``.txt`` added (a Knowledge Base parses ``.txt`` as plain text; the
outline does not read ``.txt`` as a kind, so code is still recognised from its text). Two documents with
the same name would be one object: refused, as is a key S3 cannot hold. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

PREFIX = "ckb-eval/"
SOURCE_BUCKET = "eval-source"  # the data source's bucket as eval --local names it (never created in AWS)
MAX_KEY_BYTES = 1024  # S3's limit on an object key


class DocumentNameError(ValueError):
    """Two documents of a corpus would have one name, or a name is not a possible S3 key."""


def document_key(document: dict[str, Any], prefix: str = PREFIX) -> str:
    name = str(document.get("doc_id") or document["original_uuid"]).replace("/", "_")
    return f"{prefix}{name}.txt"


def document_keys(documents: Sequence[dict[str, Any]], prefix: str = PREFIX) -> list[str]:
    """Each document's key, in order; raises ``DocumentNameError`` where two would share one (naming both
    documents as the corpus names them) or where a key is longer than S3 allows."""
    keys: list[str] = []
    named: dict[str, Any] = {}
    for document in documents:
        key = document_key(document, prefix)
        given = document.get("doc_id") or document["original_uuid"]
        if key in named:
            raise DocumentNameError(
                f"documents {named[key]!r} and {given!r} would both be {key} ('/' is written '_'): give "
                "each document its own doc_id"
            )
        size = len(key.encode("utf-8"))
        if size > MAX_KEY_BYTES:
            raise DocumentNameError(
                f"document {given!r} would be {size:,} bytes as an S3 key (at most {MAX_KEY_BYTES:,}): "
                "give it a shorter doc_id"
            )
        named[key] = given
        keys.append(key)
    return keys


def source_uri(key: str) -> str:
    """Where eval --local says the document came from: the handler's path is ``key``."""
    return f"s3://{SOURCE_BUCKET}/{key}"
