"""Pass@k, Recall@k and MRR against hand-computed cases."""

from __future__ import annotations

import pytest

from contextual_kb.evaluation import pass_at_k, reciprocal_rank, score


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
