"""The model's answer is untrusted data. Pure.

A context is kept only if, once trimmed, it is non-empty, not an echo of the document or the chunk, and no
longer than the cap (a longer one is cut at a word boundary). Whatever a document tells the model, the
worst it can do is choose the text of its own chunks' contexts, within these bounds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contextual_kb.runtime.enrichment import valid_unicode

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_WRAPPER = re.compile(r"^\s*<(context|answer)[^>]*>(.*)</\1>\s*$", re.DOTALL | re.IGNORECASE)
_SPACE = re.compile(r"\s+")
# An answer at least ECHO_MIN_CHARS long that contains the whole chunk, or whose runs of PROBE_CHARS at its
# start, a third and two thirds in are all verbatim from the source, is an echo, not a context. A context
# may quote a name or a title; it is not mostly copied text.
ECHO_MIN_CHARS = 200
PROBE_CHARS = 80
_PROMPT_TAGS = re.compile(r"</?(?:document|chunk)>")
ELLIPSIS = "…"


@dataclass(frozen=True, slots=True)
class Verdict:
    text: str | None  # the context to use, or None (then the fallback)
    reason: str = ""  # why it was rejected or changed: empty, echo, capped


def check_answer(
    answer: str, *, chunk: str, normalized_document: str, max_chars: int, truncated: bool = False
) -> Verdict:
    """``normalized_document`` is ``normalize(what the model was shown)``, computed once per document.
    ``truncated``: the model stopped at ``max_tokens``, mid-sentence: what it wrote is kept as a capped
    context (cut at a word, with an ellipsis), never as if it were whole.

    The one door for context text from outside (the model's answers, remembered contexts read back): it
    leaves as valid Unicode (a lone surrogate, legal in JSON, could not be encoded later)."""
    text = _CONTROL.sub("", valid_unicode(answer)).strip()
    wrapped = _WRAPPER.match(text)
    if wrapped:
        text = wrapped.group(2).strip()
    if not text:
        return Verdict(None, "empty")
    if _is_echo(text, chunk, normalized_document):
        return Verdict(None, "echo")
    if len(text) > max_chars:
        return Verdict(_cut(text, max_chars), "capped")
    if truncated:
        return Verdict(_cut(text, len(text)), "capped")
    return Verdict(text)


def normalize(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _is_echo(text: str, chunk: str, normalized_document: str) -> bool:
    answer = normalize(_PROMPT_TAGS.sub(" ", text))
    if len(answer) < ECHO_MIN_CHARS:
        return False
    source_chunk = normalize(chunk)
    if len(source_chunk) >= ECHO_MIN_CHARS and source_chunk in answer:
        return True
    probes = [answer[o : o + PROBE_CHARS] for o in (0, len(answer) // 3, 2 * len(answer) // 3)]
    return all(p in source_chunk or p in normalized_document for p in probes)


def _cut(text: str, limit: int) -> str:
    """At most ``limit`` characters, cut at a word, ending in an ellipsis."""
    room = limit - len(ELLIPSIS)
    cut = text[:room]
    space = cut.rfind(" ")
    if space > room * 0.6:
        cut = cut[:space]
    return cut.rstrip() + ELLIPSIS
