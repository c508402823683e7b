"""The model's answer is untrusted data. Pure.

A context is kept only if, once trimmed, it is non-empty, not an echo of the document or the chunk, and no
longer than the cap (a longer one is cut at a word boundary). Whatever a document tells the model, the
worst it can do is choose the text of its own chunks' contexts, within these bounds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_WRAPPER = re.compile(r"^\s*<(context|answer)[^>]*>(.*)</\1>\s*$", re.DOTALL | re.IGNORECASE)
_SPACE = re.compile(r"\s+")
# An answer that repeats this much of the source verbatim is an echo, not a context.
ECHO_MIN_CHARS = 200
ELLIPSIS = "…"


@dataclass(frozen=True, slots=True)
class Verdict:
    text: str | None  # the context to use, or None (then the fallback)
    reason: str = ""  # why it was rejected or changed: empty, echo, capped


def check_answer(answer: str, *, chunk: str, normalized_document: str, max_chars: int) -> Verdict:
    """``normalized_document`` is ``normalize(what the model was shown)``, computed once per document."""
    text = _CONTROL.sub("", answer).strip()
    wrapped = _WRAPPER.match(text)
    if wrapped:
        text = wrapped.group(2).strip()
    if not text:
        return Verdict(None, "empty")
    if _is_echo(text, chunk, normalized_document):
        return Verdict(None, "echo")
    if len(text) > max_chars:
        return Verdict(_cut(text, max_chars), "capped")
    return Verdict(text)


def normalize(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _is_echo(text: str, chunk: str, normalized_document: str) -> bool:
    answer = normalize(text)
    if len(answer) < ECHO_MIN_CHARS:
        return False
    probe = answer[:ECHO_MIN_CHARS]  # a long verbatim run of the source at the start of the answer
    source_chunk = normalize(chunk)
    if probe in source_chunk or (len(source_chunk) >= ECHO_MIN_CHARS and source_chunk in answer):
        return True
    return probe in normalized_document


def _cut(text: str, limit: int) -> str:
    room = limit - len(ELLIPSIS)
    cut = text[:room]
    space = cut.rfind(" ")
    if space > room * 0.6:
        cut = cut[:space]
    return cut.rstrip() + ELLIPSIS
