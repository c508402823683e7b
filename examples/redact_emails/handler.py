"""Example: e-mail addresses redacted before the model sees them, then Claude's contexts.

Deployed as the function's handler ``handler.handler`` beside the ``contextual_kb.runtime`` package (the
function's asset), with ``CONTEXT_STRATEGY=claude`` (the default). The step runs before the context step, so
the model is shown the document rebuilt from the redacted chunks: no address reaches it, nor the vector
store (each chunk is indexed as redacted). The source file in your bucket is not changed.
"""

from __future__ import annotations

import re

from contextual_kb.runtime.sdk import Chunk, Document, transformation

REPLACEMENT = "[email]"
EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
HEAD = re.compile(r"\A\S+")  # the run of non-space characters a chunk starts with
TAIL = re.compile(r"\S+\Z")  # and ends with
LOCAL_AT = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]*\Z")  # an address cut after its "@"
AT_DOMAIN = re.compile(r"@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")  # one cut before it


def redact(text: str) -> str:
    return EMAIL.sub(REPLACEMENT, text)


def cut_address(left: str, right: str) -> bool:
    """The KB's chunker cut an address in two between ``left`` and its next chunk ``right``: ``left`` ends
    with a local part and an "@" but no whole address (``ops@exam`` | ``ple.com``), or ``right`` starts with
    an "@" and a domain (``ops`` | ``@example.com``). Each part is then redacted, though neither is an
    address alone. A decorator (``@dataclass``) or a handle (``@ana``) is neither."""
    tail, head = TAIL.search(left), HEAD.match(right)
    cut_after_at = tail is not None and EMAIL.search(tail.group()) is None and LOCAL_AT.search(tail.group())
    cut_before_at = head is not None and AT_DOMAIN.match(head.group()) is not None
    return bool(cut_after_at or cut_before_at)


@transformation
def handler(document: Document) -> list[Chunk]:
    chunks = document.chunks
    out: list[Chunk] = []
    for index, chunk in enumerate(chunks):
        text = redact(chunk.text)
        # Each part of an address cut in two is redacted (the chunker strips the chunks' edges: what
        # continues a part is the next chunk's first word or the previous one's last).
        if index > 0 and cut_address(chunks[index - 1].text, chunk.text):
            text = HEAD.sub(REPLACEMENT, text, count=1)
        if index + 1 < len(chunks) and cut_address(chunk.text, chunks[index + 1].text):
            text = TAIL.sub(REPLACEMENT, text, count=1)
        if text == chunk.text:
            out.append(chunk)
        else:
            found = text.count(REPLACEMENT) - chunk.text.count(REPLACEMENT)
            out.append(chunk.with_text(text).with_metadata(emails_redacted=found))
    return out
