"""SHA-256 of a text as the runtime keys and checks texts: UTF-8 with lone surrogates kept (``surrogatepass``:
a parsed document may hold one), fed a megabyte at a time (encoding a 50 MB document whole cost two transient
copies of it: docs/RELIABILITY.md, "Load")."""

from __future__ import annotations

import hashlib

SLICE = 1 << 20


def sha256_hex(text: str, *, prefix: bytes = b"") -> str:
    """The hex SHA-256 of ``prefix`` then ``text`` in UTF-8."""
    digest = hashlib.sha256(prefix)
    for start in range(0, len(text), SLICE):
        digest.update(text[start : start + SLICE].encode("utf-8", "surrogatepass"))
    return digest.hexdigest()
