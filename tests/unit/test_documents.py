from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contextual_kb.local.kb_chunking import fixed_size_chunks
from contextual_kb.runtime.documents import assemble, overlap_length


def test_overlapping_chunks_join_once() -> None:
    text = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
    chunks = [text[0:35], text[17:60], text[45:]]
    document = assemble(chunks)
    assert document.text == text
    assert [document.chunk_text(i) for i in range(3)] == chunks


def test_chunks_without_overlap_are_joined_on_a_line_break_unless_they_meet_on_blank() -> None:
    assert assemble(["# Title", "## Next"]).text == "# Title\n## Next"
    assert assemble(["line one\n", "line two"]).text == "line one\nline two"


def test_short_or_blank_coincidences_are_not_overlaps() -> None:
    # A shared run of indentation or a lone brace is not an overlap.
    assert overlap_length("x = 1\n        ", "        y = 2", min_overlap=8) == 0
    assert overlap_length("fn a() {\n}", "}\nfn b() {}", min_overlap=8) == 0
    assert overlap_length("the end of it all", "it all begins", min_overlap=5) == len("it all")


def test_a_chunk_inside_the_previous_one_keeps_its_span() -> None:
    document = assemble(["one two three four five", "four five", "five six seven"], min_overlap=4)
    assert [document.chunk_text(i) for i in range(3)] == [
        "one two three four five",
        "four five",
        "five six seven",
    ]
    assert document.text == "one two three four five six seven"


@given(st.lists(st.text(max_size=60), max_size=12), st.integers(min_value=1, max_value=20))
def test_every_span_holds_its_chunk_exactly(chunks: list[str], min_overlap: int) -> None:
    document = assemble(chunks, min_overlap=min_overlap)
    assert len(document.spans) == len(chunks)
    for index, chunk in enumerate(chunks):
        assert document.chunk_text(index) == chunk
    starts = [s.start for s in document.spans]
    assert starts == sorted(starts)
    assert len(document.text) <= sum(len(c) + 1 for c in chunks)


@settings(max_examples=60)
@given(
    words=st.integers(min_value=1, max_value=400),
    max_tokens=st.integers(min_value=2, max_value=120),
    overlap=st.integers(min_value=1, max_value=90),
)
def test_kb_fixed_size_chunks_rebuild_the_document(words: int, max_tokens: int, overlap: int) -> None:
    """Chunks as the KB's fixed-size chunking makes them rebuild the (edge-stripped) document exactly."""
    if max_tokens * overlap // 100 < 1:
        overlap = 100 // max_tokens + 1
    text = " ".join(f"word{i:05d}" + ("\n" if i % 7 == 0 else "") for i in range(words)).strip()
    chunks = fixed_size_chunks(text, max_tokens=max_tokens, overlap_percentage=min(overlap, 99))
    assert assemble(chunks).text == text


def test_large_chunks_assemble_without_quadratic_blowup() -> None:
    block = "x" * 2_000_000
    document = assemble([block + "tail-marker-123", "tail-marker-123" + block])
    assert len(document.text) == 4_000_015
