from __future__ import annotations

import random
from collections import Counter

import pytest

from contextual_kb.runtime.context.claude.scheduling import HOLD_SECONDS, HOLDS, STARVING, Job, Planner


def jobs(doc: int, unit: int, count: int, start: int = 0) -> list[Job]:
    return [Job(doc, unit, (start + i,)) for i in range(count)]


def drain(planner: Planner) -> list[Job]:
    """Every job ``next_job`` gives now, without finishing any."""
    out = []
    while (job := planner.next_job()) is not None:
        out.append(job)
    return out


def test_a_cacheable_unit_runs_its_first_job_alone_then_the_rest_together() -> None:
    planner = Planner()
    unit_jobs = jobs(0, 0, 4)
    planner.add(0, [(True, unit_jobs)])

    first = planner.next_job()
    assert first is unit_jobs[0]
    assert first.first is True
    assert planner.next_job() is None  # the rest wait while the cache is being written
    assert planner.busy(0)

    planner.finished(first)
    rest = drain(planner)
    assert rest == unit_jobs[1:]
    assert all(job.first is False for job in rest)
    assert planner.next_job() is None


def test_an_uncacheable_unit_runs_all_its_jobs_at_once() -> None:
    planner = Planner()
    unit_jobs = jobs(0, 0, 3)
    planner.add(0, [(False, unit_jobs)])
    out = drain(planner)
    assert out == unit_jobs
    assert all(job.first is False for job in out)


def test_a_cold_unit_does_not_hold_up_the_other_units() -> None:
    planner = Planner()
    cached, plain = jobs(0, 0, 3), jobs(0, 1, 2, start=3)
    planner.add(0, [(True, cached), (False, plain)])
    assert drain(planner) == [cached[0], *plain]


def test_earlier_documents_come_first() -> None:
    planner = Planner()
    later, earlier = jobs(5, 0, 2), jobs(2, 0, 2)
    planner.add(5, [(False, later)])
    planner.add(2, [(False, earlier)])
    assert drain(planner) == [*earlier, *later]


def test_a_later_document_runs_while_an_earlier_one_waits_on_its_first_call() -> None:
    planner = Planner()
    earlier, later = jobs(1, 0, 3), jobs(2, 0, 2)
    planner.add(1, [(True, earlier)])
    planner.add(2, [(True, later)])
    assert drain(planner) == [earlier[0], later[0]]
    planner.finished(later[0])
    assert drain(planner) == [later[1]]
    planner.finished(earlier[0])
    assert drain(planner) == earlier[1:]


def test_again_puts_the_job_at_the_back_with_one_more_failure() -> None:
    planner = Planner()
    unit_jobs = jobs(0, 0, 3)
    planner.add(0, [(False, unit_jobs)])
    a, b, c = drain(planner)
    planner.again(b)
    assert b.failures == 1 and planner.failing(0) == 1
    assert planner.next_job() is None  # a failing document: one call at a time, and two still run
    planner.dropped(a)
    planner.dropped(c)
    assert planner.next_job() is b
    assert planner.next_job() is None
    planner.again(b)
    assert b.failures == 2 and planner.failing(0) == 2
    assert a.failures == 0 and c.failures == 0


def test_again_goes_behind_jobs_not_yet_started() -> None:
    planner = Planner()
    unit_jobs = jobs(0, 0, 3)
    planner.add(0, [(True, unit_jobs)])
    first = planner.next_job()
    assert first is not None
    planner.finished(first)
    second = planner.next_job()
    assert second is unit_jobs[1]
    planner.again(second)
    assert planner.next_job() is unit_jobs[2]
    planner.finished(unit_jobs[2])  # a success: the document is healthy again
    assert planner.failing(0) == 0
    assert drain(planner) == [unit_jobs[1]]


def test_a_failed_first_call_goes_to_the_back_and_the_next_job_writes_the_cache() -> None:
    planner = Planner()
    unit_jobs = jobs(0, 0, 3)
    planner.add(0, [(True, unit_jobs)])
    first = planner.next_job()
    assert first is unit_jobs[0]
    planner.again(first)
    assert first.failures == 1
    following = planner.next_job()
    assert following is unit_jobs[1] and following.first is True
    assert planner.next_job() is None  # still cold: still alone
    planner.finished(following)
    assert drain(planner) == [unit_jobs[2], first]
    assert first.first is False


def test_a_failing_document_goes_after_healthy_ones_one_call_at_a_time() -> None:
    """The earliest document's calls keep failing: it no longer takes every slot, nor every turn."""
    planner = Planner()
    bad, good = jobs(0, 0, 5), jobs(1, 0, 5, start=10)
    planner.add(0, [(False, bad)])
    planner.add(1, [(False, good)])
    taken = [planner.next_job() for _ in range(3)]
    assert taken == bad[:3]  # nothing known yet: earliest first
    for job in taken:
        assert job is not None
        planner.again(job)
    order = drain(planner)
    assert order[:5] == good  # the healthy document first, all of it
    assert order[5:] == [bad[3]]  # then the failing one, a single call
    assert planner.others_busy(0) and planner.others_busy(1)
    planner.failed(bad[3])
    assert planner.failing(0) == 4


def test_a_dropped_first_call_makes_the_next_job_of_the_cold_unit_first() -> None:
    planner = Planner()
    unit_jobs = jobs(0, 0, 3)
    planner.add(0, [(True, unit_jobs)])
    first = planner.next_job()
    assert first is not None
    planner.dropped(first)
    following = planner.next_job()
    assert following is unit_jobs[1]
    assert following.first is True
    assert planner.next_job() is None
    planner.finished(following)
    last = planner.next_job()
    assert last is unit_jobs[2] and last.first is False


def test_a_job_taken_again_in_a_warm_unit_is_not_first() -> None:
    planner = Planner()
    unit_jobs = jobs(0, 0, 2)
    planner.add(0, [(True, unit_jobs)])
    first = planner.next_job()
    assert first is not None
    planner.finished(first)
    second = planner.next_job()
    assert second is unit_jobs[1]
    planner.again(second)
    again = planner.next_job()
    assert again is second and again.first is False


def test_dropped_frees_the_unit() -> None:
    planner = Planner()
    unit_jobs = jobs(0, 0, 2)
    planner.add(0, [(False, unit_jobs)])
    a, b = drain(planner)
    planner.dropped(a)
    assert planner.busy(0)
    planner.dropped(b)
    assert not planner.busy(0)


def test_finished_queues_the_extra_jobs() -> None:
    planner = Planner()
    unit_jobs = jobs(0, 0, 1)
    planner.add(0, [(True, unit_jobs)])
    first = planner.next_job()
    assert first is not None
    extra = jobs(0, 0, 2, start=10)
    planner.finished(first, extra=extra)
    assert drain(planner) == extra


def test_take_pending_empties_one_document_or_all() -> None:
    planner = Planner()
    one, two, three = jobs(1, 0, 3), jobs(2, 0, 2), jobs(3, 0, 2)
    planner.add(1, [(True, one)])
    planner.add(2, [(False, two[:1]), (False, two[1:])])
    planner.add(3, [(False, three)])
    started = planner.next_job()
    assert started is one[0]

    assert planner.take_pending(2) == two
    assert not planner.busy(2)
    assert planner.busy(1)
    assert planner.has_pending()

    assert planner.take_pending() == [*one[1:], *three]
    assert not planner.has_pending()
    assert planner.next_job() is None
    assert planner.busy(1)  # its first call is still running
    planner.finished(started)
    assert not planner.busy(1)


def test_busy_reflects_pending_and_in_flight() -> None:
    planner = Planner()
    planner.add(0, [(False, jobs(0, 0, 1))])
    assert planner.busy(0)  # pending
    job = planner.next_job()
    assert job is not None
    assert planner.busy(0)  # in flight
    assert not planner.has_pending()
    planner.finished(job)
    assert not planner.busy(0)


def test_an_empty_document_is_not_busy_and_remove_forgets_it() -> None:
    planner = Planner()
    planner.add(0, [])
    planner.add(1, [(True, [])])
    assert not planner.busy(0) and not planner.busy(1)
    assert planner.next_job() is None
    planner.add(2, [(False, jobs(2, 0, 1))])
    planner.remove(2)
    assert planner.next_job() is None
    planner.remove(2)  # twice is fine


@pytest.mark.parametrize("seed", range(8))
def test_simulation_runs_every_job_once_and_each_cold_unit_alone(seed: int) -> None:
    rng = random.Random(seed)
    planner = Planner()
    cacheable: dict[tuple[int, int], bool] = {}
    all_jobs: list[Job] = []
    for doc in rng.sample(range(12), 6):  # added out of order
        units = []
        for unit in range(rng.randint(1, 4)):
            is_cached = rng.random() < 0.6
            unit_jobs = jobs(doc, unit, rng.randint(1, 7), start=100 * unit)
            cacheable[doc, unit] = is_cached
            units.append((is_cached, unit_jobs))
            all_jobs.extend(unit_jobs)
        planner.add(doc, units)

    limit = rng.randint(1, 6)
    running: list[Job] = []
    warm: set[tuple[int, int]] = set()
    firsts: Counter[tuple[int, int]] = Counter()
    ran: Counter[int] = Counter()
    while True:
        while len(running) < limit and (job := planner.next_job()) is not None:
            key = (job.doc, job.unit)
            ran[id(job)] += 1
            firsts[key] += job.first
            assert job.first == (cacheable[key] and key not in warm)
            running.append(job)
            if cacheable[key] and key not in warm:
                assert sum((j.doc, j.unit) == key for j in running) == 1
        if not running:
            break
        done = running.pop(rng.randrange(len(running)))
        planner.finished(done)
        warm.add((done.doc, done.unit))

    assert not planner.has_pending()
    assert all(ran[id(job)] == 1 for job in all_jobs)
    assert sum(ran.values()) == len(all_jobs)
    assert firsts == Counter(key for key, is_cached in cacheable.items() if is_cached)
    assert all(not planner.busy(doc) for doc in {job.doc for job in all_jobs})


@pytest.mark.parametrize("seed", range(8))
def test_simulation_with_failures_keeps_cold_units_serial(seed: int) -> None:
    rng = random.Random(1000 + seed)
    planner = Planner()
    all_jobs: list[Job] = []
    cacheable: dict[tuple[int, int], bool] = {}
    for doc in range(4):
        units = [
            (rng.random() < 0.7, jobs(doc, unit, rng.randint(1, 6), start=10 * unit)) for unit in range(3)
        ]
        for unit, (is_cached, unit_jobs) in enumerate(units):
            cacheable[doc, unit] = is_cached
            all_jobs.extend(unit_jobs)
        planner.add(doc, units)

    running: list[Job] = []
    warm: set[tuple[int, int]] = set()
    outcome: dict[int, str] = {}
    while True:
        while len(running) < 5 and (job := planner.next_job()) is not None:
            key = (job.doc, job.unit)
            assert id(job) not in outcome  # a job that ended never comes back
            if cacheable[key] and key not in warm:
                assert job.first
                assert not any((j.doc, j.unit) == key for j in running)
            running.append(job)
        if not running:
            break
        done = running.pop(rng.randrange(len(running)))
        roll = rng.random()
        if roll < 0.25 and done.failures < 3:
            planner.again(done)
        elif roll < 0.35:
            planner.dropped(done)
            outcome[id(done)] = "dropped"
        else:
            planner.finished(done)
            warm.add((done.doc, done.unit))
            outcome[id(done)] = "finished"

    assert set(outcome) == {id(job) for job in all_jobs}
    assert not planner.has_pending()


def test_a_throttled_job_waits_at_the_back_without_blocking_the_others() -> None:
    planner = Planner()
    a, b, c = (Job(0, 0, (i,)) for i in range(3))
    planner.add(0, [(False, [a, b, c])])
    assert planner.next_job(now=0.0) is a
    planner.later(a, not_before=5.0)
    assert a.throttles == 1 and a.failures == 0
    assert planner.next_job(now=1.0) is b  # a waits; the others go on
    assert planner.next_job(now=1.0) is c
    assert planner.next_job(now=1.0) is None
    assert planner.next_ready_in(1.0) == 4.0
    assert planner.next_job(now=5.0) is a


def test_a_throttled_first_call_stays_first_and_waits_its_turn() -> None:
    """Another job of the cold unit would be the same size (the whole document) and only drain the quota
    again; the throttled first call is tried again first, after its wait."""
    planner = Planner()
    a, b = Job(0, 0, (0,)), Job(0, 0, (1,))
    planner.add(0, [(True, [a, b])])
    assert planner.next_job(now=0.0) is a and a.first
    planner.later(a, not_before=3.0)
    assert planner.next_job(now=1.0) is None
    assert planner.next_ready_in(1.0) == 2.0
    assert planner.next_job(now=3.0) is a and a.first
    planner.finished(a)
    assert planner.next_job(now=3.0) is b and not b.first


def test_a_starving_job_holds_the_others_then_goes_first() -> None:
    """Throttled STARVING times: no other call starts while it waits (the quota refills for it), and it
    goes before earlier documents' jobs once its wait is over."""
    planner = Planner()
    early = [Job(0, 0, (i,)) for i in range(3)]
    big = Job(1, 0, (0,))
    planner.add(0, [(False, early)])
    planner.add(1, [(True, [big, Job(1, 0, (1,))])])
    assert planner.next_job(now=0.0) is early[0]
    assert planner.next_job(now=0.0) is early[1]
    assert planner.next_job(now=0.0) is early[2]
    planner.finished(early[0])
    assert planner.next_job(now=0.0) is big
    for round_ in range(STARVING):
        planner.later(big, not_before=10.0 * (round_ + 1))
        if round_ + 1 < STARVING:
            assert planner.next_job(now=10.0 * (round_ + 1)) is big
    planner.later(early[1], not_before=0.0)  # an ordinary throttled job, ready at once
    assert planner.next_job(now=15.0) is None  # held: the starving job waits until 20
    assert planner.next_ready_in(15.0) == 5.0
    assert planner.next_job(now=20.0) is big
    assert planner.next_job(now=20.0) is None  # held while it runs (the SDK may be retrying it)
    assert planner.next_ready_in(20.0) == HOLD_SECONDS
    assert planner.next_job(now=20.0 + HOLD_SECONDS) is early[1]  # at most HOLD_SECONDS
    planner.finished(early[1])
    planner.finished(big)
    assert planner.next_job(now=30.0) is not None


def test_a_starving_call_that_returns_ends_the_hold() -> None:
    planner = Planner()
    other, big = Job(0, 0, (0,)), Job(1, 0, (0,), throttles=STARVING)
    planner.add(0, [(False, [other])])
    planner.add(1, [(False, [big])])
    assert planner.next_job(now=0.0) is big  # before the earlier document
    assert planner.next_job(now=0.0) is None
    planner.finished(big)
    assert planner.next_ready_in(0.0) is None
    assert planner.next_job(now=0.0) is other


def test_unit_idle() -> None:
    planner = Planner()
    a = Job(0, 0, (0,))
    planner.add(0, [(False, [a])])
    assert not planner.unit_idle(0, 0)
    planner.next_job()
    assert not planner.unit_idle(0, 0)
    planner.finished(a)
    assert planner.unit_idle(0, 0)


def test_a_job_the_quota_never_lets_in_stops_holding_the_others_after_holds_tries() -> None:
    planner = Planner()
    others = [Job(0, 0, (i,)) for i in range(2)]
    never = Job(1, 0, (0,), throttles=STARVING)
    planner.add(0, [(False, others)])
    planner.add(1, [(False, [never])])
    now = 0.0
    for _ in range(HOLDS):
        assert planner.next_job(now=now) is never
        planner.later(never, not_before=now + 1.0)
        if never.throttles < STARVING + HOLDS:
            assert planner.next_job(now=now) is None  # held while it waits
        now += 1.0
    assert never.throttles == STARVING + HOLDS
    assert planner.next_job(now=now) is others[0]  # it waits at the back now, ready or not
    assert planner.next_job(now=now) is others[1]
    assert planner.next_job(now=now) is never
