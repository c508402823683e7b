"""Chunking a whole document by its own structure (``CHUNKING=structure``, for a data source whose chunking
strategy is NONE: the KB then hands the function each document whole). Pure: no I/O.

Boundaries, best first: the outline's sections, shallowest first (code definitions with the decorators and
comments just above them, Markdown headings, numbered clauses), then paragraphs (blank lines), lines,
sentences, words, and, inside a word longer than a chunk, token edges (never inside a character). A range
that fits ``max_tokens`` is one chunk; a larger one is split at the best boundaries inside it, its pieces
that fit are merged with their neighbours up to the size (siblings under one section), and the others are
split again one level down. The chunks partition the document in order; with ``overlap_tokens``, each also
repeats the end of the one before it (the partition is made ``overlap_tokens`` smaller, so a chunk with its
overlap still fits ``max_tokens``).

Tokens are counted by ``runtime/tokens.py``'s estimate (one a CJK, kana, hangul or Thai character, a
character each in long runs of base64 or hex, words otherwise): the embedding models' tokenizers are not
public, and the count only has to keep chunks in the range the embedding model takes, in any script. Text
without spaces (Chinese, Japanese) is cut after its sentence ends (。！？) and, failing those, after its
commas and other closing marks, never inside a character with its marks.

Time: O(n log n) in the document's size and its boundaries. Tokens are counted once, per 4 KiB block, into
prefix sums; a range's count reads them plus at most two partial blocks; every level scans a range once.
"""

from __future__ import annotations

import bisect
import itertools
import re
import unicodedata
from array import array
from collections.abc import Callable
from dataclasses import dataclass

from contextual_kb.runtime.context.outline import Outline, OutlineTimeoutError, outline
from contextual_kb.runtime.tokens import TOKEN, count_tokens

SECTION_SEPARATOR = " › "
# ckb_section in each chunk's metadata, in UTF-8 bytes: S3 Vectors allows 2 KB of filterable metadata per
# vector, shared with the KB's keys, the user's and the context's copy.
SECTION_MAX_BYTES = 200
_LABEL_MAX_CHARS = 60
_BLOCK = 4096
# Section depths told apart; deeper ones share the last level (a 30-deep outline is not 30 levels of cuts).
_MAX_SECTION_LEVELS = 8
# Lines above a definition that belong to it: decorators, annotations, attributes, doc and line comments.
# (C's preprocessor lines are not: "#include" belongs to the file, not to the function below it.)
_PREPROCESSOR = r"(?:include|define|undef|if|ifdef|ifndef|else|elif|endif|pragma|import)\b"
_ATTACHED = re.compile(rf"(?:@|#(?!{_PREPROCESSOR})|//|/\*|\*|--|;;)")
_MAX_ATTACHED_LINES = 40
_PARAGRAPH = re.compile(r"\n[^\S\n]*\n\s*")
_LINE = re.compile(r"\n")
# A sentence end: followed by white space, or, in text written without spaces, a CJK full stop, exclamation
# or question mark with its closing quotes or brackets.
_SENTENCE = re.compile(r"[.!?。！？]+[\"'’”)\]]*\s+|[。！？]+[」』”’）】〕]*")
# After these a cut falls between phrases of text written without spaces (the mark stays with its phrase).
_PHRASE_ENDS = frozenset("、，,；;：:。！？」』）】〕")


@dataclass(frozen=True, slots=True)
class Chunk:
    start: int
    end: int
    section: str  # the labels of the sections enclosing the chunk's start, outermost first ("" for none)


@dataclass(frozen=True, slots=True)
class Chunked:
    chunks: tuple[Chunk, ...]
    outline: Outline | None  # None when there was no time to read it (then no section boundaries)


def chunk_document(
    text: str,
    *,
    max_tokens: int,
    overlap_tokens: int = 0,
    path: str | None = None,
    expired: Callable[[], bool] | None = None,
) -> Chunked:
    """The chunks of ``text`` (spans that cover every character, in order). ``path``: the source key, which
    tells code from prose by its extension. ``expired``: asked while reading the outline; when it says True
    the document is chunked without section boundaries (paragraphs first), never left unchunked."""
    if max_tokens < 2 or not 0 <= overlap_tokens <= max_tokens // 2:
        raise ValueError("max_tokens must be at least 2 and overlap_tokens between 0 and max_tokens // 2")
    if not text:
        return Chunked((), None)
    try:
        info: Outline | None = outline(text, path=path, expired=expired)
    except OutlineTimeoutError:
        info = None
    splitter = _Splitter(text, max_tokens - overlap_tokens, info)
    spans = splitter.split()
    sections = [splitter.section_at(start, end) for start, end in spans]  # where each chunk's own text starts
    if overlap_tokens:
        spans = _with_overlap(text, spans, overlap_tokens, max_tokens)
    chunks = tuple(Chunk(start, end, section) for (start, end), section in zip(spans, sections, strict=True))
    return Chunked(chunks, info)


class _Tokens:
    """Token counts of ranges of one text, from prefix sums per block (a word cut by a block edge counts in
    both blocks: one token too many per 4 KiB at most)."""

    def __init__(self, text: str) -> None:
        self.text = text
        sums = array("q", [0])
        total = 0
        for start in range(0, len(text), _BLOCK):
            total += len(TOKEN.findall(text, start, start + _BLOCK))
            sums.append(total)
        self.sums = sums

    def count(self, start: int, end: int) -> int:
        if end - start <= 2 * _BLOCK:
            return len(TOKEN.findall(self.text, start, end))
        first, last = -(-start // _BLOCK), end // _BLOCK
        return (
            len(TOKEN.findall(self.text, start, first * _BLOCK))
            + self.sums[last]
            - self.sums[first]
            + len(TOKEN.findall(self.text, last * _BLOCK, end))
        )


class _Splitter:
    def __init__(self, text: str, max_tokens: int, info: Outline | None) -> None:
        self.text = text
        self.max = max_tokens
        self.tokens = _Tokens(text)
        self.info = info
        self.anchors: dict[int, int] = {}  # a boundary moved up over a definition's decorators -> its start
        self.sections = self._section_levels(info) if info is not None else []
        # After the sections: paragraphs, lines, sentences (then words and tokens, in _fill).
        self.patterns = (_PARAGRAPH, _LINE, _SENTENCE)

    # --- boundaries -----------------------------------------------------------------------------------------

    def _section_levels(self, info: Outline) -> list[list[int]]:
        """Per section level (shallowest first), the sorted offsets where its sections start (and, for code,
        where they end: the lines after a definition are not its own)."""
        depths = sorted({s.depth for s in info.sections})
        rank = {depth: min(i, _MAX_SECTION_LEVELS - 1) for i, depth in enumerate(depths)}
        best: dict[int, int] = {}  # offset -> its best (lowest) level
        for section in info.sections:
            level = rank[section.depth]
            start = section.start
            if info.kind == "code":
                start = self._attached_start(section.start)
                if start != section.start:
                    self.anchors[start] = section.start
                if 0 < section.end < len(self.text):
                    best[section.end] = min(best.get(section.end, level), level)
            if 0 < start < len(self.text):
                best[start] = min(best.get(start, level), level)
        levels: list[list[int]] = [[] for _ in range(len(set(rank.values())))]
        for offset, level in best.items():
            levels[level].append(offset)
        for offsets in levels:
            offsets.sort()
        return levels

    def _attached_start(self, start: int) -> int:
        """``start`` moved up over the decorators and comments right above it (no blank line between)."""
        text = self.text
        position = start
        for _ in range(_MAX_ATTACHED_LINES):
            if position == 0:
                break
            above = text.rfind("\n", 0, position - 1) + 1
            line = text[above : position - 1].strip()
            if not line or not _ATTACHED.match(line):
                break
            position = above
        return position

    def _cuts(self, level: int, start: int, end: int) -> list[int]:
        """Boundaries of ``level`` strictly inside ``(start, end)``, in order."""
        if level < len(self.sections):
            offsets = self.sections[level]
            return offsets[bisect.bisect_right(offsets, start) : bisect.bisect_left(offsets, end)]
        pattern = self.patterns[level - len(self.sections)]
        cuts: list[int] = []
        text = self.text
        for match in pattern.finditer(text, start, end):
            cut = match.end()
            if pattern is _PARAGRAPH:  # the start of the line after the blank ones
                cut = text.rfind("\n", match.start(), cut) + 1
            if start < cut < end and (not cuts or cut > cuts[-1]):
                cuts.append(cut)
        return cuts

    # --- splitting ------------------------------------------------------------------------------------------

    def split(self) -> list[tuple[int, int]]:
        spans: list[tuple[int, int]] = []
        self._split(0, len(self.text), 0, spans)
        return self._merge_small(_absorb_blank(self.tokens, spans))

    def _split(self, start: int, end: int, level: int, out: list[tuple[int, int]]) -> None:
        if self.tokens.count(start, end) <= self.max:
            out.append((start, end))
            return
        last = len(self.sections) + len(self.patterns)
        cuts: list[int] = []
        while level < last:
            cuts = self._cuts(level, start, end)
            if cuts:
                break
            level += 1
        if not cuts:
            self._fill(start, end, out)
            return
        edges = [start, *cuts, end]
        counts = [self.tokens.count(a, b) for a, b in itertools.pairwise(edges)]
        group_start, group_end, group_tokens = -1, -1, 0
        target = self.max
        for index, (a, b) in enumerate(itertools.pairwise(edges)):
            tokens = counts[index]
            if tokens > self.max:
                if group_start >= 0:
                    out.append((group_start, group_end))
                    group_start = -1
                self._split(a, b, level + 1, out)
                continue
            if group_start < 0:
                # A run of pieces that fit, up to the next one that does not: cut into chunks of even size
                # (a run of 1.1 chunks' worth gives two halves, not a full chunk and a scrap).
                run, following = 0, index
                while following < len(counts) and counts[following] <= self.max:  # no slice: linear
                    run += counts[following]
                    following += 1
                target = run / max(1, -(-run // self.max))
            if group_start >= 0 and group_tokens + tokens <= self.max and group_tokens < target:
                group_end, group_tokens = b, group_tokens + tokens
            else:
                if group_start >= 0:
                    out.append((group_start, group_end))
                group_start, group_end, group_tokens = a, b, tokens
        if group_start >= 0:
            out.append((group_start, group_end))

    def _merge_small(self, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """A chunk of a few tokens (a title, a heading whose section was split, a closing brace) joins a
        neighbour when the two fit: the next one if it opens a section (so a heading stays with its text),
        else the one before."""
        small = max(2, self.max // 4)
        opens = {offset for offsets in self.sections for offset in offsets}
        opens.add(0)
        out: list[tuple[int, int]] = []
        index = 0
        while index < len(spans):
            start, end = spans[index]
            tokens = self.tokens.count(start, end)
            if tokens <= small:
                if start in opens and index + 1 < len(spans):
                    following = spans[index + 1]
                    # counted together, not summed: ``000`` and ``00`` are a token each, ``00000`` five
                    if self.tokens.count(start, following[1]) <= self.max:
                        out.append((start, following[1]))
                        index += 2
                        continue
                if out and self.tokens.count(out[-1][0], end) <= self.max:
                    out[-1] = (out[-1][0], end)
                    index += 1
                    continue
            out.append((start, end))
            index += 1
        return out

    def _fill(self, start: int, end: int, out: list[tuple[int, int]]) -> None:
        """A range with no better boundary: cut after ``max`` tokens, at the last word start before (or, in
        a word longer than a chunk, at a token edge not between a character and its marks: back to the
        character, or, when marks run back to the chunk's start, on past them)."""
        text = self.text
        position = start
        while True:
            cut = -1
            word_start = -1
            for count, match in enumerate(TOKEN.finditer(text, position, end), 1):
                at = match.start()
                if count > self.max:
                    cut = at
                    break
                if at > position and (text[at - 1].isspace() or text[at - 1] in _PHRASE_ENDS):
                    word_start = at
            if cut < 0:
                out.append((position, end))
                return
            if not (text[cut - 1].isspace() or text[cut - 1] in _PHRASE_ENDS):
                cut = word_start if word_start > position else _cluster_edge(text, position, cut, end)
            out.append((position, cut))
            position = cut

    # --- sections -------------------------------------------------------------------------------------------

    def section_at(self, start: int, end: int) -> str:
        """The labels of the sections enclosing the chunk's first line of content, capped in bytes."""
        if self.info is None:
            return ""
        text = self.text
        anchor = start
        while anchor < end and text[anchor].isspace():
            anchor += 1
        anchor = self.anchors.get(start, anchor)
        labels = [_shorten(s.label) for s in self.info.path_at(anchor) if s.label]
        while len(labels) > 2 and len(SECTION_SEPARATOR.join(labels).encode()) > SECTION_MAX_BYTES:
            del labels[1]  # the container and the exact place matter most
        return _cap_bytes(SECTION_SEPARATOR.join(labels), SECTION_MAX_BYTES)


_ZWJ = "\u200d"
# Unicode's stream-safe text format allows 30 marks after a character: a longer run is not one character.
_MAX_CLUSTER = 32


def _cluster_edge(text: str, position: int, cut: int, end: int) -> int:
    """A cut near ``cut`` (after ``position``, at most ``end``) that does not part a character from its
    marks: back to the character, else on past the marks; within ``_MAX_CLUSTER`` characters either way
    (past that the text is not letters with marks but a run of them, and ``cut`` stands, so no chunk grows
    far beyond its size)."""
    back = cut
    while back > max(position + 1, cut - _MAX_CLUSTER) and _joined(text, back):
        back -= 1
    if not _joined(text, back):
        return back
    forward = cut
    while forward < min(end, cut + _MAX_CLUSTER) and _joined(text, forward):
        forward += 1
    return forward if forward == end or not _joined(text, forward) else cut


def _joined(text: str, at: int) -> bool:
    """A cut before ``text[at]`` would part a character from what belongs to it: a mark (combining marks,
    Thai vowel signs, variation selectors: Unicode category M), or either side of a zero-width joiner."""
    return unicodedata.category(text[at]).startswith("M") or text[at] == _ZWJ or text[at - 1] == _ZWJ


def _absorb_blank(tokens: _Tokens, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Spans of white space alone joined to the span before them (or, at the start, after them)."""
    out: list[tuple[int, int]] = []
    pending_start = -1
    for start, end in spans:
        if tokens.count(start, end) == 0:  # every character that is not white space is a token
            if out:
                out[-1] = (out[-1][0], end)
            elif pending_start < 0:
                pending_start = start
            continue
        out.append((pending_start if pending_start >= 0 else start, end))
        pending_start = -1
    if pending_start >= 0:  # a document of white space only: one chunk, so that nothing is lost
        out.append((pending_start, spans[-1][1]))
    return out


def _with_overlap(
    text: str, spans: list[tuple[int, int]], overlap: int, max_tokens: int
) -> list[tuple[int, int]]:
    """Each span after the first starts up to ``overlap`` tokens earlier, at a word start (so a word cut in
    the middle is not repeated as its tail), never before the start of the span before it, and only so far
    that the span still fits ``max_tokens``: the estimate is not additive (``000`` is one token alone, three
    inside ``00000``), so a span ``overlap`` smaller than the limit can still overflow with its overlap."""
    out = [spans[0]]
    for (previous, _), (start, end) in itertools.pairwise(spans):
        # Tokens are at most 16 characters and their gaps white space: a window 64 characters a token wide
        # holds ``overlap`` tokens unless the white space is long, and then fewer is fine.
        window = max(previous, start - 64 * overlap)
        starts = [m.start() for m in TOKEN.finditer(text, window, start)][-overlap:]
        begin = next(
            (
                at
                for at in starts
                if (at == previous or text[at - 1].isspace()) and count_tokens(text, at, end) <= max_tokens
            ),
            start,
        )
        out.append((begin, end))
    return out


def _shorten(label: str) -> str:
    return label if len(label) <= _LABEL_MAX_CHARS else label[: _LABEL_MAX_CHARS - 1].rstrip() + "…"


def _cap_bytes(text: str, limit: int) -> str:
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= limit:
        return text
    return encoded[: limit - 3].decode("utf-8", "ignore").rstrip() + "…"
