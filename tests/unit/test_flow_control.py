from __future__ import annotations

import math

from contextual_kb.runtime.context.claude.flow_control import AdaptiveLimit, Breaker
from contextual_kb.runtime.deadline import Deadline


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# --- AdaptiveLimit ---


def test_limit_starts_at_the_maximum() -> None:
    limit = AdaptiveLimit(10, clock=FakeClock())
    assert limit.allowed == 10
    assert limit.cuts == 0


def test_a_throttle_cuts_the_limit_by_the_decrease() -> None:
    clock = FakeClock()
    limit = AdaptiveLimit(10, clock=clock)
    limit.on_throttle()
    assert limit.allowed == 7
    assert limit.cuts == 1
    clock.advance(1.0)
    limit.on_throttle()
    assert limit.allowed == 4  # 4.9
    assert limit.cuts == 2


def test_a_burst_of_throttles_within_the_cooldown_counts_once() -> None:
    clock = FakeClock()
    limit = AdaptiveLimit(10, cooldown=2.0, clock=clock)
    limit.on_throttle()
    for _ in range(7):
        clock.advance(0.25)
        limit.on_throttle()
    assert limit.allowed == 7
    assert limit.cuts == 1
    clock.advance(0.25)  # 2.0 since the cut
    limit.on_throttle()
    assert limit.allowed == 4
    assert limit.cuts == 2


def test_the_limit_never_goes_below_one() -> None:
    clock = FakeClock()
    limit = AdaptiveLimit(3, clock=clock)
    for _ in range(20):
        limit.on_throttle()
        clock.advance(5.0)
        assert limit.allowed >= 1
    assert limit.allowed == 1
    limit.on_success()  # from 1.0: + 1/1
    assert limit.allowed == 2


def test_successes_grow_the_limit_by_one_over_the_limit() -> None:
    limit = AdaptiveLimit(10, clock=FakeClock())
    limit.on_throttle()  # 7.0
    for _ in range(7):
        limit.on_success()
    assert limit.allowed == 7  # 7 + 1/7 + 1/7.14 + ... = 7.95
    limit.on_success()
    assert limit.allowed == 8  # 8.07


def test_successes_never_grow_past_the_maximum() -> None:
    limit = AdaptiveLimit(4, clock=FakeClock())
    for _ in range(100):
        limit.on_success()
    assert limit.allowed == 4
    limit.on_throttle()
    for _ in range(100):
        limit.on_success()
    assert limit.allowed == 4


def test_custom_decrease() -> None:
    limit = AdaptiveLimit(10, decrease=0.5, clock=FakeClock())
    limit.on_throttle()
    assert limit.allowed == 5


# --- Breaker ---


def test_breaker_opens_after_threshold_consecutive_failures() -> None:
    clock = FakeClock()
    breaker = Breaker(threshold=3, cooldown=10.0, clock=clock)
    breaker.on_failure("throttled")
    breaker.on_failure("throttled")
    assert breaker.allows()
    assert breaker.next_probe_in() is None  # closed
    breaker.on_failure("timeout")
    assert not breaker.allows()
    assert breaker.opened == 1
    assert breaker.reason == "timeout"
    assert breaker.next_probe_in() == 10.0


def test_a_success_resets_the_consecutive_count() -> None:
    breaker = Breaker(threshold=3, clock=FakeClock())
    for _ in range(5):
        breaker.on_failure("x")
        breaker.on_failure("x")
        breaker.on_success()
    assert breaker.allows()
    assert breaker.failures == 0
    assert breaker.opened == 0


def test_after_the_cooldown_exactly_one_probe_goes() -> None:
    clock = FakeClock()
    breaker = Breaker(threshold=2, cooldown=10.0, clock=clock)
    breaker.on_failure("x")
    breaker.on_failure("x")
    clock.advance(4.0)
    assert not breaker.allows()
    assert breaker.next_probe_in() == 6.0
    clock.advance(5.75)
    assert not breaker.allows()
    clock.advance(0.25)
    assert breaker.next_probe_in() == 0.0
    assert breaker.allows()  # the probe
    assert not breaker.allows()
    assert not breaker.allows()
    assert breaker.next_probe_in() is None  # a probe is out


def test_a_successful_probe_closes_the_breaker() -> None:
    clock = FakeClock()
    breaker = Breaker(threshold=2, cooldown=10.0, clock=clock)
    breaker.on_failure("x")
    breaker.on_failure("x")
    clock.advance(10.0)
    assert breaker.allows()
    breaker.on_success()
    assert all(breaker.allows() for _ in range(5))
    assert breaker.next_probe_in() is None
    breaker.on_failure("x")  # the count starts over
    assert breaker.allows()


def test_a_failed_probe_reopens_the_breaker_for_a_cooldown() -> None:
    clock = FakeClock()
    breaker = Breaker(threshold=2, cooldown=10.0, max_probes=3, clock=clock)
    breaker.on_failure("x")
    breaker.on_failure("x")
    clock.advance(10.0)
    assert breaker.allows()
    breaker.on_failure("still failing", probe=True)
    assert not breaker.gave_up
    assert breaker.failed_probes == 1
    assert not breaker.allows()
    assert breaker.next_probe_in() == 10.0
    clock.advance(10.0)
    assert breaker.allows()


def test_max_probes_failed_probes_give_up() -> None:
    clock = FakeClock()
    breaker = Breaker(threshold=1, cooldown=5.0, max_probes=3, clock=clock)
    breaker.on_failure("x")
    for probe in range(3):
        clock.advance(5.0)
        assert breaker.allows(), probe
        breaker.on_failure("x", probe=True)
    assert breaker.gave_up
    clock.advance(1000.0)
    assert not breaker.allows()
    assert breaker.next_probe_in() is None


def test_a_call_started_before_the_breaker_opened_is_not_the_probe() -> None:
    clock = FakeClock()
    breaker = Breaker(threshold=2, cooldown=10.0, max_probes=1, clock=clock)
    breaker.on_failure("x")
    breaker.on_failure("x")
    clock.advance(10.0)
    assert breaker.allows()  # the probe goes
    breaker.on_failure("an older call")  # not the probe: the probe is still out
    assert not breaker.gave_up
    assert not breaker.allows()  # and no second probe starts
    breaker.on_failure("the probe", probe=True)
    assert breaker.gave_up


def test_a_fatal_failure_gives_up_at_once() -> None:
    breaker = Breaker(threshold=5, clock=FakeClock())
    breaker.on_failure("AccessDeniedException", fatal=True)
    assert breaker.gave_up
    assert breaker.reason == "AccessDeniedException"
    assert not breaker.allows()
    breaker.on_success()
    assert not breaker.allows()  # for the rest of the invocation


def test_an_abandoned_probe_lets_another_probe_go() -> None:
    clock = FakeClock()
    breaker = Breaker(threshold=1, cooldown=5.0, max_probes=1, clock=clock)
    breaker.on_failure("x")
    clock.advance(5.0)
    assert breaker.allows()
    assert not breaker.allows()
    breaker.on_abandoned()
    assert breaker.failed_probes == 0
    assert breaker.allows()
    assert not breaker.allows()


def test_failures_of_one_document_among_others_do_not_open_the_breaker() -> None:
    clock = FakeClock(0.0)
    breaker = Breaker(threshold=3, cooldown=10.0, clock=clock)
    for _ in range(10):
        breaker.on_failure("500", source=7, alone=False)
    assert breaker.open_until is None and breaker.allows()
    breaker.on_failure("500", source=8, alone=False)  # a second document fails too: the model, likely
    assert breaker.open_until == 10.0 and not breaker.allows()


def test_failures_of_the_only_document_with_work_open_the_breaker() -> None:
    breaker = Breaker(threshold=3, cooldown=10.0, clock=FakeClock(0.0))
    for _ in range(3):
        breaker.on_failure("500", source=7, alone=True)
    assert breaker.open_until is not None


def test_a_success_forgets_the_documents_of_the_failures() -> None:
    breaker = Breaker(threshold=2, cooldown=10.0, clock=FakeClock(0.0))
    breaker.on_failure("500", source=1, alone=False)
    breaker.on_success()
    breaker.on_failure("500", source=2, alone=False)
    breaker.on_failure("500", source=2, alone=False)
    assert breaker.open_until is None


# --- Deadline ---


def test_from_remaining_keeps_the_reserve() -> None:
    clock = FakeClock(500.0)
    deadline = Deadline.from_remaining(60.0, reserve_seconds=15.0, clock=clock)
    assert deadline.hard_stop == 545.0
    assert deadline.remaining() == 45.0
    assert not deadline.passed()
    clock.advance(44.0)
    assert deadline.remaining() == 1.0
    assert not deadline.passed()
    clock.advance(1.0)
    assert deadline.passed()


def test_a_reserve_larger_than_the_time_left_stops_at_once() -> None:
    clock = FakeClock(500.0)
    deadline = Deadline.from_remaining(10.0, reserve_seconds=30.0, clock=clock)
    assert deadline.hard_stop == 500.0
    assert deadline.passed()
    assert not deadline.can_start(0.0)


class FixedTail:
    def __init__(self, seconds: float, io_seconds: float) -> None:
        self._seconds, self._io = seconds, io_seconds

    def seconds(self) -> float:
        return self._seconds

    def io_seconds(self) -> float:
        return self._io


def test_the_tail_comes_off_the_model_time_and_its_io_part_off_the_compute_time() -> None:
    clock = FakeClock(0.0)
    deadline = Deadline.from_remaining(100.0, reserve_seconds=10.0, clock=clock).budgeted(
        FixedTail(30.0, 5.0)
    )
    assert deadline.hard_stop == 90.0
    assert deadline.remaining() == 60.0 and deadline.compute_remaining() == 85.0
    assert deadline.can_start(59.0) and not deadline.can_start(60.0)
    clock.advance(60.0)
    assert deadline.passed() and deadline.compute_remaining() == 25.0


def test_can_start_compares_the_expected_time_with_what_remains() -> None:
    clock = FakeClock(0.0)
    deadline = Deadline.from_remaining(100.0, reserve_seconds=20.0, clock=clock)
    assert deadline.can_start(79.9)
    assert not deadline.can_start(80.0)
    clock.advance(50.0)
    assert deadline.can_start(29.0)
    assert not deadline.can_start(30.0)


def test_unlimited_never_passes() -> None:
    deadline = Deadline.unlimited()
    assert not deadline.passed()
    assert deadline.remaining() == math.inf
    assert deadline.can_start(1e12)
