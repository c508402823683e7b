"""What is left once the model stops, and how long it takes (the deadline's tail). Pure."""

from __future__ import annotations

import pytest

from contextual_kb.runtime.budget import DEFAULT_CHARS_PER_SECOND, DEFAULT_S3_SECONDS, WorkLeft


def test_the_event_sets_the_work_and_each_step_takes_it_off() -> None:
    work = WorkLeft(parallelism=4)
    work.expect(writes=8, rereads=2, chars=3_000_000)
    # Before any measure: the defaults; writes four at a time, re-reads one at a time.
    assert work.io_seconds() == pytest.approx(2 * DEFAULT_S3_SECONDS + 2 * DEFAULT_S3_SECONDS)
    assert work.seconds() == pytest.approx(work.io_seconds() + 3_000_000 / DEFAULT_CHARS_PER_SECOND)
    for _ in range(8):
        work.read(0.05)  # validation reads: S3's measured latency
    work.read(0.05, reread=True)
    work.wrote(0.1)
    assert work.rereads == 1 and work.writes == 7
    assert work.io_seconds() == pytest.approx(1 * 0.05 + 2 * 0.1)
    work.file_done(3_000_000)
    assert work.seconds() == pytest.approx(work.io_seconds())


def test_a_measured_structural_speed_replaces_the_default_within_bounds() -> None:
    work = WorkLeft(parallelism=1)
    work.expect(chars=10_000_000)
    work.note_structural(2_000_000, 1.0)  # 2 MB/s
    assert work.seconds() == pytest.approx(5.0)
    fast = WorkLeft(parallelism=1)
    fast.expect(chars=10_000_000)
    fast.note_structural(1_000_000_000, 1.0)  # implausibly fast: held to 10x the default
    assert fast.seconds() == pytest.approx(10_000_000 / (10 * DEFAULT_CHARS_PER_SECOND))
    little = WorkLeft(parallelism=1)
    little.expect(chars=1_000_000)
    little.note_structural(100, 0.001)  # too little timed to trust
    assert little.seconds() == pytest.approx(1_000_000 / DEFAULT_CHARS_PER_SECOND)
