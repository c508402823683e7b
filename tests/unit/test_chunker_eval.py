"""Chunker against chunker: the golden chunks' coverage by the top k, pure parts."""

from __future__ import annotations

from contextual_kb.evaluation.chunkers import NonBlank, covered_share, golden_spans, score_coverage

DOCS = [
    {
        "original_uuid": "a",
        "content": "alpha beta\n\ngamma delta",
        "chunks": [
            {"original_index": 0, "content": "alpha beta\n\n"},
            {"original_index": 1, "content": "gamma delta"},
        ],
    },
    {"original_uuid": "b", "content": "one two", "chunks": [{"original_index": 0, "content": "one two"}]},
]


def test_golden_chunks_are_found_in_their_documents() -> None:
    assert golden_spans(DOCS) == {("a", 0): ("a", 0, 12), ("a", 1): ("a", 12, 23), ("b", 0): ("b", 0, 7)}


def test_coverage_counts_non_blank_characters_once_and_only_in_the_same_document() -> None:
    blank = NonBlank(DOCS)
    golden = ("a", 0, 12)  # "alpha beta\n\n": 9 non-blank characters
    assert covered_share(golden, [("a", 0, 5)], blank) == 5 / 9
    assert covered_share(golden, [("a", 0, 5), ("a", 3, 8), ("a", 0, 5)], blank) == 7 / 9  # overlaps once
    assert covered_share(golden, [("b", 0, 12)], blank) == 0.0  # another document's text does not count
    assert covered_share(golden, [("a", 4, 30)], blank) == 1 - 4 / 9


def test_a_query_scores_the_mean_over_its_golden_chunks_and_half_counts_queries() -> None:
    blank = NonBlank(DOCS)
    spans = [("a", 0, 12), ("a", 12, 18), ("b", 0, 7)]
    golden = [[("a", 0, 12), ("a", 12, 23)], [("b", 0, 7)]]
    scores = score_coverage(golden, [[1, 0], [0, 2]], spans, blank, [1, 2])
    # Query 1 at k=1: chunk 1 covers "gamma " of the second golden chunk (5 of 10): (0 + 0.5) / 2.
    assert scores.per_query[1] == (0.25, 0.0)
    assert scores.per_query[2] == (0.75, 1.0)
    assert scores.coverage_at == {1: 12.5, 2: 87.5}
    assert scores.half_at == {1: 0.0, 2: 100.0}
