"""The fault harness's judgment of a compute pass (``faults.Watch``), on an injected CPU clock: the work a
pass did past its compute time, which a loaded machine does not lengthen (issue 54: wall-clock seconds past
it failed busy runs without a fault of the code's)."""

from __future__ import annotations

import threading

from contextual_kb.local import faults


class CpuClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def spend(self, seconds: float) -> None:
        self.now += seconds


def judged(watch: faults.Watch) -> list[str]:
    outcome = faults.Outcome("pass", chunks_in=0)
    watch.report(outcome, expected_hard_stop=0.0)
    return outcome.deadline_problems()


def test_a_pass_that_stops_at_its_first_look_past_its_time_keeps_it() -> None:
    cpu = CpuClock()
    watch = faults.Watch(cpu_clock=cpu)
    watch.pass_started(1.0)
    for left in (0.8, 0.6, 0.4, 0.2, 0.0):  # a look every 0.2 s of work, the last one finds none left
        cpu.spend(0.2)
        watch.looked_at_compute(left - 0.05)
    cpu.spend(0.01)  # the document-level context for the rest
    watch.pass_ended()
    assert watch.compute_late < 0.1
    assert judged(watch) == []


def test_a_pass_that_never_looks_is_judged_when_it_ends() -> None:
    cpu = CpuClock()
    watch = faults.Watch(cpu_clock=cpu)
    watch.pass_started(0.4)
    cpu.spend(2.0)
    watch.pass_ended()
    assert round(watch.compute_late, 6) == 1.6
    assert judged(watch) == ["a compute pass went on 1.6 s of its CPU past its compute time"]


def test_a_pass_that_sees_its_time_is_up_and_goes_on_is_judged_by_what_it_did_after() -> None:
    cpu = CpuClock()
    watch = faults.Watch(cpu_clock=cpu)
    watch.pass_started(0.5)
    cpu.spend(0.5)
    watch.looked_at_compute(-0.01)
    cpu.spend(1.2)
    watch.looked_at_compute(-1.2)  # later looks change nothing: the first one past its time is judged
    watch.pass_ended()
    assert round(watch.compute_late, 6) == 1.2
    assert judged(watch) != []


def test_time_the_thread_waited_for_a_core_is_not_work() -> None:
    """On a loaded machine the wall clock ran 2 s past while the thread had no core: its CPU did not."""
    cpu = CpuClock()
    watch = faults.Watch(cpu_clock=cpu)
    watch.pass_started(0.3)
    cpu.spend(0.25)
    watch.looked_at_compute(-2.0)  # 2 s of wall clock past its time, 0.25 s of its own work
    watch.pass_ended()
    assert watch.compute_late == 0.0
    assert judged(watch) == []


def test_a_pass_given_no_time_that_gives_up_at_once_keeps_it() -> None:
    cpu = CpuClock()
    watch = faults.Watch(cpu_clock=cpu)
    watch.pass_started(-0.5)
    watch.looked_at_compute(-0.5)
    cpu.spend(0.02)
    watch.pass_ended()
    assert judged(watch) == []


def test_looks_outside_a_pass_are_not_a_pass() -> None:
    """The engine looks at the compute time to decide what to start: the model time's checks judge it."""
    cpu = CpuClock()
    watch = faults.Watch(cpu_clock=cpu)
    watch.looked_at_compute(1.0)
    cpu.spend(5.0)
    watch.looked_at_compute(-4.0)
    watch.pass_ended()
    assert watch.compute_late == 0.0


def test_each_thread_is_judged_on_its_own_pass() -> None:
    """Two passes at once (the engine's fallback beside the rechunking): a look on one thread is not the
    other's, so one pass's look cannot hide the other's overrun."""
    cpu = CpuClock()
    watch = faults.Watch(cpu_clock=cpu)
    watch.pass_started(0.2)
    started, looked = threading.Event(), threading.Event()

    def other() -> None:
        watch.pass_started(3.0)
        started.set()
        looked.wait(5)
        watch.looked_at_compute(2.0)  # has time left: says nothing of the first thread's pass
        watch.pass_ended()

    thread = threading.Thread(target=other)
    thread.start()
    started.wait(5)
    cpu.spend(1.0)
    looked.set()
    thread.join(5)
    watch.pass_ended()
    assert round(watch.compute_late, 6) == 0.8
