from __future__ import annotations

from contextual_kb.runtime.context.claude.windows import CONTINUES, OMITTED, Unit, estimate_tokens, plan_units
from contextual_kb.runtime.documents import Document, Span, assemble

MAX_TOKENS, WINDOW_TOKENS, OPENING_TOKENS = 20_000, 4_000, 1_000
# The separators a windowed unit may add around its pieces ("… omitted …", "… continues …").
SLACK = estimate_tokens(OMITTED.format(count=10**9) + CONTINUES)


def long_document(count: int = 2000, size: int = 500) -> tuple[Document, list[str]]:
    """``count`` distinct chunks of ``size`` characters (no overlap: joined on line breaks)."""
    chunks = [(f"Chunk {i:05d}: " + f"lorem ipsum dolor sit amet {i} " * 30)[:size] for i in range(count)]
    return assemble(chunks), chunks


def plan(document: Document, **kwargs: int) -> list[Unit]:
    options = {"max_tokens": MAX_TOKENS, "window_tokens": WINDOW_TOKENS, "opening_tokens": OPENING_TOKENS}
    return plan_units(document, **(options | kwargs))


def holds(unit: Unit, span: Span) -> bool:
    return any(start <= span.start and span.end <= end for start, end in unit.pieces)


def test_estimate_tokens_counts_bytes() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abc") == 1
    assert estimate_tokens("abcd") == 2
    assert estimate_tokens("é") == 1  # 2 bytes
    assert estimate_tokens("😀" * 3) == 4  # 12 bytes


def test_a_short_document_is_one_unit_with_every_chunk() -> None:
    chunks = ["First part of a short note.", "Second part.", "Third and last part."]
    document = assemble(chunks)
    [unit] = plan(document)
    assert unit == Unit(((0, len(document.text)),), (0, 1, 2), windowed=False)
    assert unit.render(document.text) == document.text


def test_a_document_exactly_at_the_limit_is_one_unit() -> None:
    text = "a" * (3 * 1000)
    document = Document(text, (Span(0, 10), Span(2990, 3000)))
    [unit] = plan(document, max_tokens=1000)
    assert not unit.windowed and unit.chunks == (0, 1)
    assert len(plan(Document(text + "a", document.spans), max_tokens=1000)) > 1


def test_a_long_document_puts_every_chunk_in_exactly_one_unit() -> None:
    document, chunks = long_document()
    assert estimate_tokens(document.text) > MAX_TOKENS
    units = plan(document)
    assert len(units) > 1
    assert all(unit.windowed for unit in units)
    seen = sorted(index for unit in units for index in unit.chunks)
    assert seen == list(range(len(chunks)))


def test_a_chunk_up_to_a_quarter_window_lies_wholly_in_its_unit() -> None:
    document, chunks = long_document()
    # ~3 characters a token here: a 4,000-token window is ~12,000 characters, a quarter ~3,000 > 500.
    assert max(len(c) for c in chunks) * 4 < WINDOW_TOKENS * 2.9
    for unit in plan(document):
        rendered = unit.render(document.text)
        for index in unit.chunks:
            assert holds(unit, document.spans[index]), index
            assert chunks[index] in rendered, index


def test_windowed_units_are_bounded() -> None:
    document, _ = long_document()
    for unit in plan(document):
        tokens = estimate_tokens(unit.render(document.text))
        assert tokens <= MAX_TOKENS + SLACK
        assert tokens <= WINDOW_TOKENS + OPENING_TOKENS + SLACK
        assert sum(end - start for start, end in unit.pieces) < len(document.text) / 10


def test_windowed_units_are_bounded_when_the_window_is_larger_than_the_limit() -> None:
    document, _ = long_document()
    for unit in plan(document, max_tokens=3_000, window_tokens=50_000, opening_tokens=5_000):
        assert estimate_tokens(unit.render(document.text)) <= 3_000 + SLACK


def test_the_opening_is_in_every_windowed_unit() -> None:
    document, _ = long_document()
    units = plan(document)
    later = [unit for unit in units if len(unit.pieces) == 2]
    assert later
    assert len({unit.pieces[0] for unit in later}) == 1  # one and the same opening
    opening_end = later[0].pieces[0][1]
    assert 2 * OPENING_TOKENS < opening_end <= 3 * OPENING_TOKENS
    for unit in units:
        assert unit.pieces[0][0] == 0
        assert unit.render(document.text).startswith(document.text[:opening_end])


def test_the_opening_ends_on_a_line_break_when_one_is_near() -> None:
    document, _ = long_document(size=300)  # a line break every 301 characters
    units = plan(document)
    later = [unit for unit in units if len(unit.pieces) == 2]
    assert later
    opening_end = later[0].pieces[0][1]
    assert document.text[opening_end - 1] == "\n"
    assert 2 * OPENING_TOKENS < opening_end <= 3 * OPENING_TOKENS


def test_a_long_opening_is_whole_in_every_windowed_unit() -> None:
    document, _ = long_document()
    units = plan(document, max_tokens=20_000, window_tokens=2_000, opening_tokens=10_000)
    opening_end = max(unit.pieces[0][1] for unit in units if len(unit.pieces) == 2)
    for unit in units:
        assert unit.pieces[0][1] >= opening_end


def test_windowed_units_are_bounded_in_a_document_of_mixed_density() -> None:
    text = "a" * 20_000 + "😀" * 20_000  # 1 byte a character, then 4
    document = Document(text, (Span(0, 10), Span(30_000, 30_010)))
    for unit in plan(document, max_tokens=1_000, window_tokens=800, opening_tokens=200):
        assert estimate_tokens(unit.render(text)) <= 1_000 + SLACK


def test_render_shows_omitted_text_and_continuation() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(100))
    unit = Unit(((0, 10), (40, 60)), (0,), windowed=True)
    assert unit.render(text) == text[:10] + OMITTED.format(count=30) + text[40:60] + CONTINUES
    whole_tail = Unit(((0, 10), (40, 100)), (0,), windowed=True)
    assert whole_tail.render(text) == text[:10] + OMITTED.format(count=30) + text[40:]
    assert Unit(((0, 100),), (0,)).render(text) == text


def test_render_inserts_marks_at_their_positions() -> None:
    document = assemble(["alpha alpha", "beta beta", "gamma gamma"])
    unit = Unit(((0, len(document.text)),), (0, 1, 2))
    marks = {span.start: f"<{i + 1}>" for i, span in enumerate(document.spans)}
    assert unit.render(document.text, marks) == "<1>alpha alpha\n<2>beta beta\n<3>gamma gamma"


def test_render_marks_only_inside_the_pieces() -> None:
    text = "0123456789" * 10
    unit = Unit(((0, 10), (50, 70)), (0,), windowed=True)
    marked = unit.render(text, {5: "|A|", 30: "|B|", 50: "|C|", 69: "|D|", 70: "|E|"})
    assert "|B|" not in marked and "|E|" not in marked
    assert marked.startswith("01234|A|56789")
    assert "|C|0123456789012345678|D|9" in marked
    stripped = marked.replace("|A|", "").replace("|C|", "").replace("|D|", "")
    assert stripped == unit.render(text)


def test_grouped_marks_in_windowed_units_sit_before_their_chunks() -> None:
    document, chunks = long_document(count=400)
    units = plan(document, max_tokens=5_000, window_tokens=2_000, opening_tokens=500)
    assert len(units) > 1
    for unit in units:
        marks = {document.spans[i].start: f"⟪chunk {i + 1}⟫" for i in unit.chunks}
        rendered = unit.render(document.text, marks)
        for index in unit.chunks:
            assert f"⟪chunk {index + 1}⟫{chunks[index]}" in rendered


def test_a_huge_document_never_fails_and_gives_bounded_units() -> None:
    size = 50_000_000
    document = assemble(["Introduction of the big file.", "x" * size, "The end of the big file."])
    assert len(document.text) > size
    units = plan_units(document, max_tokens=100_000, window_tokens=16_000, opening_tokens=2_000)
    assert sorted(i for unit in units for i in unit.chunks) == [0, 1, 2]
    for unit in units:
        rendered = unit.render(document.text)
        assert estimate_tokens(rendered) <= 100_000 + SLACK
        assert rendered.startswith("Introduction of the big file.")
    last = next(unit for unit in units if 2 in unit.chunks)
    assert last.render(document.text).endswith("The end of the big file.")


def test_a_huge_single_chunk_document_is_windowed_not_sent_whole() -> None:
    text = "y" * 10_000_000
    units = plan_units(
        Document(text, (Span(0, len(text)),)), max_tokens=100_000, window_tokens=16_000, opening_tokens=0
    )
    [unit] = units
    assert unit.chunks == (0,)
    assert unit.windowed
    assert estimate_tokens(unit.render(text)) <= 16_000 + SLACK


def test_a_document_without_chunks_gives_no_windowed_units() -> None:
    assert plan(Document("z" * 200_000, ())) == []
    [unit] = plan(Document("short", ()))
    assert unit.chunks == ()
