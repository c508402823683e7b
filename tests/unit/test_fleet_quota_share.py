"""bench/fleet.py's share of the quota used: the binding quota, window by window."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from fleet import binding_share, full_minutes  # bench/ holds scripts, not a package

RPM, TPM = 600, 600_000  # 10 requests and 10,000 tokens a second


def test_the_quota_that_binds_in_each_window_is_the_one_counted() -> None:
    # 5 s of large calls (the token quota full), then 5 s of small ones (the request quota full)
    requests = [2] * 5 + [10] * 5
    tokens = [10_000] * 5 + [1_000] * 5
    assert binding_share(requests, tokens, RPM, TPM) == pytest.approx(1.0)
    # over the whole run neither quota's share is near full
    assert sum(requests) / (10 * 10) == pytest.approx(0.6)
    assert sum(tokens) / (10_000 * 10) == pytest.approx(0.55)


def test_one_call_larger_than_a_second_of_quota_is_averaged_with_the_seconds_it_starves() -> None:
    tokens = [20_000, 0, 5_000, 10_000, 10_000]
    assert binding_share([1, 0, 1, 2, 2], tokens, RPM, TPM) == pytest.approx(0.9)


def test_an_unused_stretch_and_a_short_last_window_count_for_their_seconds() -> None:
    requests = [10] * 5 + [0] * 5 + [10] * 2
    assert binding_share(requests, [0] * 12, RPM, TPM) == pytest.approx(7 / 12)
    assert binding_share([], [], RPM, TPM) == 0.0


def test_under_a_minute_window_only_whole_minutes_of_settled_charges_count() -> None:
    """The stand-in's series (minute start from the first request, settled tokens): the minute the work ran
    out in is partial and left out; a whole minute with nothing settled is a 0, not skipped."""
    series = [(0, 790_000), (60, 805_000), (120, 300_000)]
    assert full_minutes(series, busy_seconds=150.2) == [790_000, 805_000]
    assert full_minutes(series, busy_seconds=180.0) == [790_000, 805_000, 300_000]
    assert full_minutes([(0, 5), (120, 7)], busy_seconds=185.0) == [5, 0, 7]
    assert full_minutes(series, busy_seconds=59.9) == []  # no whole minute: the share is not measured
