"""Where outputs go: one key per input batch (or per part of a large one). Pure.

The intermediate storage is "the location where input/output of the Lambda is expected" (AWS): outputs go
inside it, under the directory that the event's batch keys share (the KB's ``aws/bedrock/knowledge_bases/``
path, inside whatever prefix the data source's intermediate URI has), then ``OUTPUT_PREFIX``, then the rest
of the input key. Deterministic: a retried call overwrites its own outputs.

S3 keys are at most 1,024 bytes of UTF-8. A key the KB could write but whose output key would be longer
gets a shorter one, the same on every call: the middle of the rest of the key is replaced by a hash of
the whole input key (its head and its tail, where the batch number and extension are, are kept).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

S3_MAX_KEY_BYTES = 1024
_HASH_CHARS = 16
_PART_HASH_CHARS = 8
_TAIL_BYTES = 120  # kept from the end of a shortened key: the file's name, its batch number, the extension


def shared_directory(keys: Iterable[str]) -> str:
    """The longest directory (ending in ``/``) that every key is in; ``""`` when they share none."""
    common: str | None = None
    for key in keys:
        if common is None:
            common = key[: key.rfind("/") + 1]
            continue
        limit = min(len(common), len(key))
        length = 0
        while length < limit and common[length] == key[length]:
            length += 1
        common = common[: common.rfind("/", 0, length) + 1]
        if not common:
            return ""
    return common or ""


def output_key(key: str, *, directory: str, prefix: str, part: int = 1) -> str:
    """The output key of input ``key`` (which lies under ``directory``), or of its ``part``-th part (from 2,
    ``~partN-`` and a hash of the input key before the extension: an input key that happens to end in the
    same ``~partN`` cannot take a part's output key)."""
    rest = key[len(directory) :] if key.startswith(directory) else key
    stem, extension = _split_extension(rest)
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    suffix = f"~part{part}-{digest[:_PART_HASH_CHARS]}" if part > 1 else ""
    wanted = f"{directory}{prefix}{stem}{suffix}{extension}"
    if _size(wanted) <= S3_MAX_KEY_BYTES:
        return wanted
    tag = "~" + digest[:_HASH_CHARS] + "~"
    for head in (f"{directory}{prefix}", directory):  # without OUTPUT_PREFIX only if it alone is too long
        room = S3_MAX_KEY_BYTES - _size(head) - _size(tag) - _size(suffix) - _size(extension)
        if room >= 0:
            tail = _cut_tail(stem, min(_TAIL_BYTES, room // 2))
            lead = _cut_head(stem, room - _size(tail))
            return f"{head}{lead}{tag}{tail}{suffix}{extension}"
    # Only when the shared directory is itself within a hash of S3's limit: the KB could not write there.
    raise ValueError(f"no output key fits S3's {S3_MAX_KEY_BYTES}-byte limit under {directory!r}")


def _split_extension(name: str) -> tuple[str, str]:
    dot = name.rfind(".")
    if dot <= name.rfind("/") + 1 or len(name) - dot > 10:
        return name, ""
    return name[:dot], name[dot:]


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))  # a lone surrogate counts as S3 would see its bytes


def _cut_head(text: str, limit: int) -> str:
    """The longest head of ``text`` within ``limit`` bytes, cut between characters."""
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= limit:
        return text
    return encoded[: max(0, limit)].decode("utf-8", "ignore")


def _cut_tail(text: str, limit: int) -> str:
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= limit:
        return text
    return encoded[len(encoded) - max(0, limit) :].decode("utf-8", "ignore")
