"""Retrieval metrics. Pure.

Chunks compare by their ORIGINAL stripped text, never with a context prepended (Anthropic's guide, whose
codebase benchmark ``evaluation/datasets.py`` fetches).

- Pass@k: per query, the share of its golden chunks found in the top k; averaged over queries (x100).
- Recall@k: the same share over all golden chunks pooled (a query with many golden chunks weighs more).
- MRR: per query, 1 / the rank of the first golden chunk retrieved (0 if none); averaged over queries.
- A paired difference: two configurations' Pass@k over the same queries, with a 95% interval, so that a
  gain on a small labelled set can be told from noise (one query of 124 moves Pass@k by 0.81).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

Match = Callable[
    [str, str], bool
]  # (golden chunk, retrieved chunk) -> the retrieved one holds the golden one
_WORD = re.compile(r"\S+")
SHINGLE = 5


def pass_at_k(golden: Sequence[str], retrieved: Sequence[str], k: int) -> float:
    """Share of golden chunks whose stripped text equals the stripped text of one of the top-k retrieved."""
    if not golden:
        return 0.0
    return found_at_k(golden, retrieved, k) / len(golden)


def same_text(golden: str, retrieved: str) -> bool:
    return golden.strip() == retrieved.strip()


def mostly_within(golden: str, retrieved: str, share: float = 0.5) -> bool:
    """For a Knowledge Base that chunked the corpus its own way: at least ``share`` of the golden chunk's
    word 5-grams appear in the retrieved chunk (a short golden chunk must appear whole)."""
    words, inside = _WORD.findall(golden), _WORD.findall(retrieved)
    if len(words) < SHINGLE:
        return " ".join(words) in " ".join(inside)
    have = {tuple(inside[i : i + SHINGLE]) for i in range(len(inside) - SHINGLE + 1)}
    grams = [tuple(words[i : i + SHINGLE]) for i in range(len(words) - SHINGLE + 1)]
    return sum(gram in have for gram in grams) >= share * len(grams)


def found_at_k(golden: Sequence[str], retrieved: Sequence[str], k: int, match: Match = same_text) -> int:
    if match is same_text:
        top = {text.strip() for text in retrieved[:k]}
        return sum(1 for text in golden if text.strip() in top)
    return sum(1 for text in golden if any(match(text, other) for other in retrieved[:k]))


def reciprocal_rank(golden: Sequence[str], retrieved: Sequence[str], match: Match = same_text) -> float:
    for rank, text in enumerate(retrieved, 1):
        if any(match(wanted, text) for wanted in golden):
            return 1.0 / rank
    return 0.0


@dataclass(frozen=True, slots=True)
class Scores:
    pass_at: dict[int, float]  # x100
    recall_at: dict[int, float]  # x100
    mrr: float  # x100
    queries: int
    # Each query's Pass@k (0-1), in the order scored: what paired_difference compares.
    per_query: dict[int, tuple[float, ...]] = field(default_factory=dict, repr=False, compare=False)

    def as_dict(self) -> dict[str, float | int]:
        out: dict[str, float | int] = {f"pass@{k}": round(v, 2) for k, v in self.pass_at.items()}
        out |= {f"recall@{k}": round(v, 2) for k, v in self.recall_at.items()}
        out["mrr"] = round(self.mrr, 2)
        out["queries"] = self.queries
        return out


def score(
    runs: Iterable[tuple[Sequence[str], Sequence[str]]], ks: Sequence[int], match: Match = same_text
) -> Scores:
    """``runs``: per query, (golden chunk texts, retrieved chunk texts in rank order)."""
    passes: dict[int, list[float]] = {k: [] for k in ks}
    found = dict.fromkeys(ks, 0)
    golden_total, mrr, count = 0, 0.0, 0
    for golden, retrieved in runs:
        count += 1
        golden_total += len(golden)
        mrr += reciprocal_rank(golden, retrieved, match)
        for k in ks:
            hits = found_at_k(golden, retrieved, k, match)
            passes[k].append(hits / len(golden) if golden else 0.0)
            found[k] += hits
    if not count:
        return Scores(dict.fromkeys(ks, 0.0), dict.fromkeys(ks, 0.0), 0.0, 0, {k: () for k in ks})
    return Scores(
        {k: 100 * sum(v) / count for k, v in passes.items()},
        {k: 100 * v / max(1, golden_total) for k, v in found.items()},
        100 * mrr / count,
        count,
        {k: tuple(v) for k, v in passes.items()},
    )


Z_95 = statistics.NormalDist().inv_cdf(0.975)  # 1.96


@dataclass(frozen=True, slots=True)
class Difference:
    """One configuration's Pass@k minus another's, over the same queries, in points (x100)."""

    k: int
    points: float
    margin: float | None  # half-width of the 95% interval; None where the approximation cannot give one
    better: int  # queries whose Pass@k rose
    worse: int  # and fell
    p_value: float  # two-sided sign test on better against worse

    def as_dict(self) -> dict[str, float | int | None]:
        margin = None if self.margin is None else round(self.margin, 2)
        return {
            "k": self.k,
            "points": round(self.points, 2),
            "margin95": margin,
            "better": self.better,
            "worse": self.worse,
            "p_value": round(self.p_value, 4),
        }


def paired_difference(baseline: Scores, other: Scores, k: int) -> Difference:
    """``other`` minus ``baseline`` at Pass@k, the two scored on the same queries in the same order.

    The interval is the normal approximation of the mean per-query difference (pairing removes the spread
    between queries, which is most of the noise). It is too sure when only a handful of queries change, so
    the sign test's p-value comes with it: exact however few change."""
    before, after = baseline.per_query[k], other.per_query[k]
    if len(before) != len(after):
        raise ValueError(f"not the same queries: {len(before)} against {len(after)}")
    deltas = [100 * (b - a) for a, b in zip(before, after, strict=True)]
    better, worse = sum(1 for d in deltas if d > 0), sum(1 for d in deltas if d < 0)
    if not deltas:
        return Difference(k, 0.0, None, 0, 0, 1.0)
    margin = None  # one query, or every query moved alike: no spread to go on (none moved: exactly zero)
    if len(deltas) > 1:
        spread = statistics.stdev(deltas)
        if spread or not (better or worse):
            margin = Z_95 * spread / math.sqrt(len(deltas))
    return Difference(k, statistics.fmean(deltas), margin, better, worse, sign_test(better, worse))


def sign_test(up: int, down: int) -> float:
    """Two-sided exact sign test: the chance of a split at least this lopsided if up and down were equally
    likely (ties left out). Pure."""
    n = up + down
    if not n:
        return 1.0
    # Our own, not scipy's binomtest: scipy comes only with the dense extra (torch); this runs without it.
    # Binomial terms in logs: exact integers (math.comb over 2**n) take seconds at tens of thousands.
    log_half_n = n * math.log(2.0)
    tail = sum(
        math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - log_half_n)
        for i in range(max(up, down), n + 1)
    )
    return min(1.0, 2 * tail)


RRF_K = 60  # the constant of Cormack et al. (2009), also OpenSearch's default for its RRF processor


def reciprocal_rank_fusion(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> list[int]:
    """Hybrid retrieval's fusion: each item scores sum(1 / (k + rank)) over the rankings that hold it (rank
    from 1); best first, ties in order of first appearance."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, 1):
            fused[item] = fused.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(fused, key=lambda item: -fused[item])
