"""Pass@k, Recall@k and MRR against hand-computed cases."""

from __future__ import annotations

import math

import pytest

from contextual_kb.evaluation.metrics import pass_at_k, reciprocal_rank, score


def test_pass_at_k_compares_stripped_original_text() -> None:
    golden = ["alpha", "beta "]
    retrieved = [" gamma", "beta", "alpha\n", "delta"]
    assert pass_at_k(golden, retrieved, 1) == 0.0
    assert pass_at_k(golden, retrieved, 2) == 0.5
    assert pass_at_k(golden, retrieved, 3) == 1.0
    assert pass_at_k([], retrieved, 3) == 0.0


def test_reciprocal_rank_is_that_of_the_first_golden_chunk() -> None:
    assert reciprocal_rank(["b", "c"], ["a", "c", "b"]) == 0.5
    assert reciprocal_rank(["z"], ["a", "b"]) == 0.0


def test_scores_over_queries_hand_computed() -> None:
    runs = [
        (["a", "b", "c", "d"], ["a", "x", "b", "y", "c"]),  # found @1: 1, @3: 2, @5: 3; RR 1
        (["e"], ["x", "e"]),  # found @1: 0, @3: 1, @5: 1; RR 1/2
    ]
    scores = score(runs, [1, 3, 5])
    # Pass@k: mean over queries of the share found.
    assert scores.pass_at[1] == pytest.approx(100 * (1 / 4 + 0) / 2)
    assert scores.pass_at[3] == pytest.approx(100 * (2 / 4 + 1) / 2)
    assert scores.pass_at[5] == pytest.approx(100 * (3 / 4 + 1) / 2)
    # Recall@k: golden chunks pooled, 5 in all.
    assert scores.recall_at[1] == pytest.approx(100 * 1 / 5)
    assert scores.recall_at[3] == pytest.approx(100 * 3 / 5)
    assert scores.recall_at[5] == pytest.approx(100 * 4 / 5)
    assert scores.mrr == pytest.approx(100 * (1 + 0.5) / 2)
    assert scores.queries == 2
    assert score([], [5]).pass_at == {5: 0.0}


def test_reciprocal_rank_fusion_hand_computed() -> None:
    from contextual_kb.evaluation.metrics import reciprocal_rank_fusion

    # k=1: item 7 scores 1/2 + 1/3 = 0.833; item 3: 1/3 + 1/2 = 0.833 (tie: first seen first); item 5: 1/4.
    assert reciprocal_rank_fusion([[7, 3, 5], [3, 7]], k=1) == [7, 3, 5]
    # An item in one ranking only still counts: 9 (1/(60+1)) beats 4 (1/(60+2)) and 2 (1/(60+3)).
    assert reciprocal_rank_fusion([[9, 4], [2]], k=60)[:2] == [9, 2]
    # Agreement beats a single first place: 1 is 2nd and 2nd (2/62) > 8 first once (1/61).
    assert reciprocal_rank_fusion([[8, 1], [6, 1]], k=60)[0] == 1
    assert reciprocal_rank_fusion([]) == []


def test_dense_windows_cover_a_long_text_with_overlap() -> None:
    from contextual_kb.evaluation.dense import windows

    text = " ".join(f"w{i}" for i in range(10))
    offsets = [(m, m + len(word)) for m, word in _positions(text)]
    assert windows(text, offsets, 20) == [text]  # short enough: whole
    pieces = windows(text, offsets, 4)  # stride 3: tokens 0-3, 3-6, 6-9
    assert pieces == ["w0 w1 w2 w3", "w3 w4 w5 w6", "w6 w7 w8 w9"]


def _positions(text: str) -> list[tuple[int, str]]:
    import re

    return [(m.start(), m.group()) for m in re.finditer(r"\S+", text)]


def test_scores_keep_each_querys_pass_at_k_in_order() -> None:
    runs = [(["a", "b"], ["a", "x"]), (["c"], ["x", "y"]), (["d"], ["d"])]
    assert score(runs, [1, 2]).per_query == {1: (0.5, 0.0, 1.0), 2: (0.5, 0.0, 1.0)}


def test_paired_difference_hand_computed() -> None:
    from contextual_kb.evaluation.metrics import paired_difference

    golden = [["a"], ["b", "c"], ["d", "e"], ["f"]]
    baseline = score(zip(golden, [["a"], ["b", "x"], ["x"], ["f"]], strict=True), [2])  # 1, 1/2, 0, 1
    other = score(zip(golden, [["a"], ["b", "c"], ["d", "x"], ["x"]], strict=True), [2])  # 1, 1, 1/2, 0
    gain = paired_difference(baseline, other, 2)
    # Per query, in points: 0, +50, +50, -100. Mean 0; sample deviation sqrt((50² + 50² + 100²) / 3).
    assert gain.points == pytest.approx(0.0)
    assert gain.margin == pytest.approx(1.959964 * (15000 / 3) ** 0.5 / 2)
    assert (gain.better, gain.worse) == (2, 1)
    assert gain.as_dict() == {
        "k": 2,
        "points": 0.0,
        "margin95": 69.3,
        "better": 2,
        "worse": 1,
        "p_value": 1.0,  # 2 up, 1 down: 2 * P(X >= 2 | n=3, 1/2) = 2 * 4/8, capped at 1
    }
    # The mean of the differences is the difference of the Pass@k figures.
    lift = paired_difference(score(zip(golden, [[]] * 4, strict=True), [2]), other, 2)
    assert lift.points == pytest.approx(other.pass_at[2]) and (lift.better, lift.worse) == (3, 0)


def test_paired_difference_needs_the_same_queries_and_two_for_an_interval() -> None:
    from contextual_kb.evaluation.metrics import paired_difference

    one = score([(["a"], ["a"])], [1])
    assert paired_difference(score([(["a"], ["x"])], [1]), one, 1).margin is None
    assert paired_difference(one, one, 1).points == 0.0
    # Every query moved alike: no spread, but not a certain gain, so no interval; none moved: exactly 0.
    golden = [["a"], ["b"], ["c"]]
    missed, found = (
        score(zip(golden, [["x"]] * 3, strict=True), [1]),
        score(zip(golden, golden, strict=True), [1]),
    )
    alike = paired_difference(missed, found, 1)
    assert (alike.points, alike.margin, alike.better) == (100.0, None, 3)
    assert alike.p_value == pytest.approx(2 / 8)
    assert paired_difference(found, found, 1).margin == 0.0
    # No queries: nothing to compare, no error.
    none = paired_difference(score([], [1]), score([], [1]), 1)
    assert (none.points, none.margin, none.better, none.worse, none.p_value) == (0.0, None, 0, 0, 1.0)
    with pytest.raises(ValueError, match="not the same queries"):
        paired_difference(one, score([(["a"], ["a"]), (["b"], ["b"])], [1]), 1)


def test_versus_raw_pairs_rows_by_retrieval() -> None:
    from contextual_kb.evaluation.offline import Row, versus_raw

    golden = [["a"], ["b"]]
    raw = score(zip(golden, [["a"], ["x"]], strict=True), [1])
    better = score(zip(golden, [["a"], ["b"]], strict=True), [1])
    rows = [
        Row("raw", "bm25 code-aware", raw),
        Row("structural", "bm25 code-aware", better),
        Row("structural", "dense minilm", better),  # no raw row with this retrieval
        Row("raw", "bm25 opensearch-builtin", better),
        Row("claude", "bm25 opensearch-builtin", raw),
    ]
    gains = versus_raw(rows, 1)
    assert gains[0] is None and gains[2] is None and gains[3] is None
    assert gains[1] is not None and gains[1].points == pytest.approx(50.0) and gains[1].better == 1
    assert gains[4] is not None and gains[4].points == pytest.approx(-50.0) and gains[4].worse == 1


def test_sign_test_hand_computed() -> None:
    from contextual_kb.evaluation.metrics import sign_test

    assert sign_test(6, 0) == pytest.approx(2 / 64)  # both all-up and all-down splits of 6
    assert sign_test(4, 1) == pytest.approx(2 * (5 + 1) / 32)  # 4 or 5 of 5 either way
    assert sign_test(0, 4) == pytest.approx(2 / 16)
    assert sign_test(3, 3) == 1.0 and sign_test(0, 0) == 1.0 and sign_test(1, 0) == 1.0
    # In logs, so large sets stay fast and exact enough: 60 up, 40 down against the integer computation.
    assert sign_test(60, 40) == pytest.approx(2 * sum(math.comb(100, i) for i in range(60, 101)) / 2**100)
