"""Which model call to start next. Pure: no threads, no clock, no I/O.

A *unit* is what one cached prompt prefix covers: a whole document, or one window of a long one. Its first
call runs alone, because a cache entry becomes readable only once the response that writes it has started:
calls sent alongside it would each pay the write. When the first call returns, the unit's other calls are
free to run side by side. Units that cannot be cached (too short, or not cached on purpose) have no first
call. Earlier documents go first, so results stream out in order and few documents are held at once.

A job throttled again and again (``STARVING`` times after the SDK's retries) is starving: a quota counted in
tokens lets a large call in only once the bucket has refilled to its size, which the smaller calls keep
draining; so while one waits, no other call starts, and once its wait is over it goes first. For
``HOLDS`` tries at most: a call throttled more than that (one the quota may never let in) waits at the back
like any other, and holds nobody up.

A document whose own calls keep failing is contained: from its first failure until its next success it goes
after every healthy document and has at most one call running, and a failed call goes to the back of its
queue. So one bad document cannot fill every slot, nor take every turn, while the others wait.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

STARVING = 2
HOLDS = 4  # a starving job holds the others for at most this many of its tries
HOLD_SECONDS = 5.0  # at most this long does a starving job's call hold the others


@dataclass(eq=False)
class Job:
    """One model call: the contexts of ``chunks`` (document chunk indices) of one unit."""

    doc: int
    unit: int
    chunks: tuple[int, ...]
    grouped: bool = False
    failures: int = 0  # calls of this job that failed transiently (after the SDK's retries)
    throttles: int = 0  # calls of this job still throttled after the SDK's retries
    not_before: float = 0.0  # a throttled job waits until then (the caller's clock)
    first: bool = False  # the call that writes the unit's cache
    probe: bool = False  # the call the breaker let through to test the model (set by the caller)
    max_tokens: int = 0  # what its request asked for (set by the caller)


@dataclass
class _Unit:
    cacheable: bool
    pending: deque[Job] = field(default_factory=deque)
    warm: bool = False  # the first call returned (or the unit is not cached)
    in_flight: int = 0


@dataclass
class _Doc:
    units: list[_Unit]
    failing: int = 0  # calls of this document failed since its last success

    def in_flight(self) -> int:
        return sum(u.in_flight for u in self.units)


class Planner:
    def __init__(self) -> None:
        self._docs: dict[int, _Doc] = {}
        self._holding: tuple[Job, float] | None = None  # the starving job running, and since when
        # Jobs queued or running that are starving: most runs have none, and then next_job need not look
        # through every queued job for one.
        self._starving_jobs: set[Job] = set()

    def add(self, doc: int, units: list[tuple[bool, list[Job]]]) -> None:
        """``units``: per unit, whether it is cached and its jobs in order."""
        self._docs[doc] = _Doc(
            [_Unit(cacheable, deque(jobs), warm=not cacheable) for cacheable, jobs in units]
        )
        self._track(job for _, jobs in units for job in jobs)

    def next_job(self, now: float = 0.0) -> Job | None:
        """The next call to start: healthy documents first, earliest first; a failing document one call at a
        time; skipping jobs waiting until later than ``now``. A starving job goes first, and no other starts
        while it waits or, for up to ``HOLD_SECONDS``, runs (the SDK may be retrying it)."""
        if self._holding is not None and now - self._holding[1] < HOLD_SECONDS:
            return None
        self._holding = None
        starving = self._starving()
        if starving is not None:
            if starving.not_before > now:
                return None
            self._holding = (starving, now)
            return self._take(starving)
        return next((self._take(j) for j in self._eligible() if j.not_before <= now), None)

    def _eligible(self) -> Iterator[Job]:
        """The jobs that may start once their wait is over, in order: a cold unit's only its head (its first
        call; a throttled one waits its turn, not replaced by another as large), nothing of a unit whose
        first call runs, a failing document's only while none of its calls runs."""
        for doc in sorted(self._docs, key=lambda d: (self._docs[d].failing > 0, d)):
            state = self._docs[doc]
            if state.failing and state.in_flight():
                continue
            for unit in state.units:
                if not unit.pending or (not unit.warm and unit.in_flight):
                    continue
                yield from unit.pending if unit.warm else (unit.pending[0],)

    def _starving(self) -> Job | None:
        """The starving job that may start soonest, if any."""
        if not self._starving_jobs:
            return None
        starving = [j for j in self._eligible() if j in self._starving_jobs]
        return min(starving, key=lambda j: j.not_before, default=None)

    def _take(self, job: Job) -> Job:
        unit = self._unit(job)
        unit.pending.remove(job)
        job.first = not unit.warm
        unit.in_flight += 1
        return job

    def next_ready_in(self, now: float) -> float | None:
        """Seconds until a waiting job may start, when none may start now (None: one may, or none waits)."""
        if self._holding is not None and now - self._holding[1] < HOLD_SECONDS:
            return self._holding[1] + HOLD_SECONDS - now
        starving = self._starving()
        waits = [starving.not_before - now] if starving else [j.not_before - now for j in self._eligible()]
        if not waits or min(waits) <= 0:
            return None
        return min(waits)

    def _release(self, job: Job) -> None:
        if self._holding is not None and self._holding[0] is job:
            self._holding = None

    def _track(self, jobs: Iterable[Job]) -> None:
        self._starving_jobs.update(j for j in jobs if STARVING <= j.throttles < STARVING + HOLDS)

    def _ended(self, job: Job) -> None:
        """The job will not be called again."""
        self._release(job)
        self._starving_jobs.discard(job)

    def _unit(self, job: Job) -> _Unit:
        return self._docs[job.doc].units[job.unit]

    def finished(self, job: Job, *, extra: list[Job] | None = None) -> None:
        """The call returned an answer: the unit is warm, the document healthy; ``extra`` jobs (chunks to ask
        again) are queued."""
        self._ended(job)
        unit = self._unit(job)
        unit.in_flight -= 1
        unit.warm = True
        self._docs[job.doc].failing = 0
        if extra:
            unit.pending.extend(extra)
            self._track(extra)

    def again(self, job: Job) -> None:
        """The call failed transiently: to the back of its unit's queue (it tries again after the others),
        and its document counts one more failure."""
        self._release(job)
        unit = self._unit(job)
        unit.in_flight -= 1
        job.failures += 1
        self._docs[job.doc].failing += 1
        unit.pending.append(job)

    def failed(self, job: Job) -> None:
        """The call failed for good (the caller gives its chunks the fallback): its document counts it."""
        self.dropped(job)
        self._docs[job.doc].failing += 1

    def failing(self, doc: int) -> int:
        """Calls of ``doc`` that failed since its last success."""
        return self._docs[doc].failing

    def others_busy(self, doc: int) -> bool:
        """Another document has calls queued or running (so a failure of ``doc`` may be its own)."""
        return any(self.busy(other) for other in self._docs if other != doc)

    def later(self, job: Job, not_before: float) -> None:
        """The call was throttled: to the back of its unit's queue (a cold unit's first call: to the front,
        still its first), not to start before ``not_before``."""
        self._release(job)
        unit = self._unit(job)
        unit.in_flight -= 1
        job.throttles += 1
        job.not_before = not_before
        self._starving_jobs.discard(job)
        self._track([job])
        if unit.warm:
            unit.pending.append(job)
        else:
            unit.pending.appendleft(job)

    def dropped(self, job: Job) -> None:
        """The call failed for good; its chunks get the fallback (the caller's business)."""
        self._ended(job)
        self._unit(job).in_flight -= 1

    def take_pending(self, doc: int | None = None) -> list[Job]:
        """Remove and return the jobs not started (of one document, or of all)."""
        out: list[Job] = []
        for number in [doc] if doc is not None else sorted(self._docs):
            for unit in self._docs[number].units:
                out.extend(unit.pending)
                unit.pending.clear()
        self._starving_jobs.difference_update(out)
        return out

    def unit_idle(self, doc: int, unit: int) -> bool:
        """The unit has nothing queued or running (its prompt text may be let go)."""
        state = self._docs[doc].units[unit]
        return not state.pending and not state.in_flight

    def has_pending(self) -> bool:
        return any(u.pending for d in self._docs.values() for u in d.units)

    def busy(self, doc: int) -> bool:
        """The document has calls queued or running."""
        return any(u.pending or u.in_flight for u in self._docs[doc].units)

    def remove(self, doc: int) -> None:
        self._docs.pop(doc, None)
        self._starving_jobs = {job for job in self._starving_jobs if job.doc != doc}
