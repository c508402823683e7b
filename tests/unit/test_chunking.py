"""Chunking by structure (CHUNKING=structure): every character in a chunk, in order, each chunk within the
size, cut at the document's own boundaries, best first. Properties over any text, then the boundaries."""

from __future__ import annotations

import itertools
import re
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextual_kb.runtime.chunking import SECTION_MAX_BYTES, TOKEN, Chunk, chunk_document


def tokens(text: str) -> int:
    """Tokens, marks not counted alone and a sequence joined by zero-width joiners counted once (a chunk may
    carry them past its size rather than part them from their character)."""
    joined = re.sub("\u200d.?", "", text, flags=re.DOTALL)
    return sum(1 for t in TOKEN.findall(joined) if not all(_mark(c) for c in t))


def _mark(character: str) -> bool:
    return unicodedata.category(character).startswith("M") or character == "\u200d"


def texts(text: str, chunks: tuple[Chunk, ...]) -> list[str]:
    return [text[c.start : c.end] for c in chunks]


# Text that looks like documents: headings, code, clauses, blank lines, long words, any characters.
fragment = st.one_of(
    st.sampled_from(
        [
            "# Title\n",
            "## Section\n",
            "### Deeper\n",
            "\n",
            "\n\n",
            "    ",
            "def f(x):\n    return x\n",
            "class A:\n    def m(self):\n        pass\n",
            "@decorator\n",
            "# a comment\n",
            "fn main() {\n    let x = 1;\n}\n",
            "1.2 Limitation of liability\n",
            "ARTICLE IV Termination\n",
            "A sentence ends here. Another one starts! ",
            "word ",
            "x" * 40,
            "e\u0301",  # e and a combining acute accent
            "日本語の文。",
            "สวัสดีครับผมชื่อสมชาย",  # Thai: vowel signs are marks, and no spaces
            "❤️👨\u200d👩\u200d👧",  # a variation selector; a family joined by zero-width joiners
        ]
    ),
    st.text(max_size=60),
)
document = st.lists(fragment, max_size=80).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=document,
    max_tokens=st.integers(min_value=2, max_value=60),
    path=st.sampled_from([None, "a.py", "b.md", "c.txt", "d.rs"]),
)
def test_chunks_partition_the_document_in_order_within_the_size(
    text: str, max_tokens: int, path: str | None
) -> None:
    chunks = chunk_document(text, max_tokens=max_tokens, path=path).chunks
    if not text:
        assert chunks == ()
        return
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    for before, after in itertools.pairwise(chunks):
        assert before.end == after.start  # no gap, no overlap: every character exactly once
    assert "".join(texts(text, chunks)) == text
    for chunk in chunks:
        body = text[chunk.start : chunk.end]
        assert tokens(body) <= max_tokens
        assert body.strip() or len(chunks) == 1  # no chunk of white space alone (unless that is all)
        assert len(chunk.section.encode("utf-8", "surrogatepass")) <= SECTION_MAX_BYTES
    for chunk in chunks[1:]:  # never between a character and its marks, nor at a zero-width joiner
        assert not unicodedata.category(text[chunk.start]).startswith("M")
        assert "\u200d" not in (text[chunk.start], text[chunk.start - 1])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=document, max_tokens=st.integers(min_value=4, max_value=60), data=st.data())
def test_with_overlap_every_character_is_still_covered_in_order(
    text: str, max_tokens: int, data: st.DataObject
) -> None:
    overlap = data.draw(st.integers(min_value=1, max_value=max_tokens // 2))
    chunks = chunk_document(text, max_tokens=max_tokens, overlap_tokens=overlap).chunks
    if not text:
        return
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    for before, after in itertools.pairwise(chunks):
        assert before.start <= after.start <= before.end < after.end  # covered, in order, moving on
        # What a chunk repeats is at most ``overlap`` tokens of the one before it.
        assert tokens(text[after.start : before.end]) <= overlap
    for chunk in chunks:
        assert tokens(text[chunk.start : chunk.end]) <= max_tokens


def test_code_is_cut_at_definitions_with_their_decorators_and_comments() -> None:
    method = (
        "    def {name}(self, value: int) -> int:\n"
        + "        value = value + 1\n" * 12
        + "        return value\n"
    )
    text = (
        '"""A module."""\n\nimport os\n\n\n'
        "# The store keeps values.\n@dataclass\nclass Store:\n"
        + method.format(name="put")
        + "\n    # Reads one value back.\n    @cached\n"
        + method.format(name="get")
        + "\n\ndef helper() -> None:\n    pass\n"
    )
    chunks = chunk_document(text, max_tokens=120, path="store.py").chunks
    bodies = texts(text, chunks)
    # No cut between a definition and the comment and decorators above it.
    assert not any(b.startswith(("@dataclass", "class Store", "    @cached", "    def get")) for b in bodies)
    assert any("# The store keeps values.\n@dataclass\nclass Store:" in b for b in bodies)
    get = next(b for b in bodies if "def get" in b)
    assert get.lstrip().startswith("# Reads one value back.\n    @cached\n    def get")
    assert not any("def put" in b and "def get" in b for b in bodies)  # each method its own chunk
    sections = {c.section for c in chunks if "def get" in text[c.start : c.end]}
    assert sections == {"class Store › def get(self, value: int) -> int"}


def test_small_sibling_sections_merge_and_a_large_one_splits_at_its_subsections() -> None:
    small = "".join(f"## Small {n}\n\nOne short paragraph.\n\n" for n in range(3))
    large = "## Large\n\n" + "".join(
        f"### Part {n}\n\n" + "A sentence about this part. " * 20 + "\n\n" for n in range(3)
    )
    text = "# Guide\n\n" + small + large
    chunks = chunk_document(text, max_tokens=150, path="guide.md").chunks
    bodies = texts(text, chunks)
    assert bodies[0].count("## Small") == 3  # the three small sections together (with the title)
    assert any(b.startswith("## Large\n\n### Part 0") for b in bodies)  # the heading with its first part
    for n in (1, 2):  # each other part of the large section starts a chunk
        assert any(b.startswith(f"### Part {n}") for b in bodies)
    part = next(c for c in chunks if text[c.start :].startswith("### Part 1"))
    assert part.section == "Guide › Large › Part 1"


def test_contracts_are_cut_at_numbered_clauses() -> None:
    clause = "The parties agree to the terms set out in this clause and its schedules. " * 6
    text = "MASTER AGREEMENT\n\n" + "".join(
        f"ARTICLE {n} Heading {n}\n\n{n}.1 First\n\n{clause}\n\n{n}.2 Second\n\n{clause}\n\n" for n in (1, 2)
    )
    whole = texts(text, chunk_document(text, max_tokens=200, path="msa.txt").chunks)
    assert [b.split("\n", 1)[0] for b in whole] == [
        "MASTER AGREEMENT",
        "ARTICLE 2 Heading 2",
    ]  # one article each
    split = texts(text, chunk_document(text, max_tokens=120, path="msa.txt").chunks)  # an article is too long
    assert [b.split("\n", 1)[0] for b in split] == [
        "MASTER AGREEMENT",  # the title joins the first clause: it is not a chunk alone
        "1.2 Second",
        "ARTICLE 2 Heading 2",
        "2.2 Second",
    ]


def test_prose_is_cut_at_paragraphs_then_sentences_then_words() -> None:
    sentence = "This sentence has exactly eight words in it. "
    text = (sentence * 3 + "\n\n") * 2 + sentence * 40
    bodies = texts(text, chunk_document(text, max_tokens=40).chunks)
    assert bodies[0] == sentence * 3 + "\n\n"
    assert all(b.endswith((". ", ".", "\n\n")) for b in bodies)  # whole sentences
    words = "word " * 500
    assert all(b.endswith(" ") for b in texts(words, chunk_document(words, max_tokens=30).chunks))


def test_a_word_longer_than_a_chunk_is_cut_between_characters() -> None:
    word = ("é" * 10 + "e\u0301") * 400  # no white space at all, combining marks inside
    chunks = chunk_document(word, max_tokens=20).chunks
    assert len(chunks) > 1 and "".join(texts(word, chunks)) == word
    assert not any(unicodedata.category(word[c.start]).startswith("M") for c in chunks[1:])
    thai = "สวัสดีครับผมชื่อสมชาย" * 20
    starts = [c.start for c in chunk_document(thai, max_tokens=20).chunks[1:]]
    assert starts and not any(unicodedata.category(thai[s]).startswith("M") for s in starts)


@pytest.mark.parametrize("run", ["x\u200d", "\u0301", "\u200d"])
def test_a_run_of_marks_or_joiners_is_cut_near_the_size_not_after_the_run(run: str) -> None:
    """Marks or joiners by the thousand are not one character: the cut may move a few characters to keep
    one whole, never the length of the run (one chunk of 160,000 tokens, before)."""
    text = "a" + run * 40_000
    chunks = chunk_document(text, max_tokens=512).chunks
    assert "".join(texts(text, chunks)) == text
    assert len(chunks) > 10 and max(c.end - c.start for c in chunks) <= 2 * 512 + 64


def test_white_space_alone_is_one_chunk_and_nothing_is_no_chunk() -> None:
    assert chunk_document("   \n\n  ", max_tokens=10).chunks == (Chunk(0, 7, ""),)
    assert chunk_document("", max_tokens=10).chunks == ()


def test_no_time_for_the_outline_still_chunks_by_paragraphs() -> None:
    text = "# A\n\n" + "Some words here. " * 30 + "\n\n# B\n\n" + "More words. " * 30
    chunked = chunk_document(text, max_tokens=60, path="x.md", expired=lambda: True)
    assert chunked.outline is None or chunked.outline.sections  # (a short text is read before asking)
    assert "".join(texts(text, chunked.chunks)) == text


@pytest.mark.parametrize(("max_tokens", "overlap"), [(1, 0), (10, 6), (10, -1)])
def test_sizes_out_of_range_are_refused(max_tokens: int, overlap: int) -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        chunk_document("text", max_tokens=max_tokens, overlap_tokens=overlap)


@pytest.mark.parametrize("overlap", [0, 1, 2])
@pytest.mark.parametrize("text", ["00000", "000000000", "1234567 89"])
def test_chunks_counted_whole_fit_though_the_estimate_is_not_additive(text: str, overlap: int) -> None:
    """``000`` is one token alone and three inside ``00000``: joining two small chunks, or a chunk and its
    overlap, is counted whole, not summed (the sum let a 5-token chunk through for 4)."""
    chunks = chunk_document(text, max_tokens=4, overlap_tokens=overlap).chunks
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    assert all(tokens(text[c.start : c.end]) <= 4 for c in chunks)
