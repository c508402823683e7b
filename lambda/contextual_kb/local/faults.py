"""Fault injection, end to end: the real handler on moto S3 (in process) against the Bedrock stand-in, with
faults in the model (the stand-in's controls, changed while the handler runs) and in S3 (a botocore hook on
the handler's own S3 client, so the SDK's retries really run), then every promise checked from the
outside: each chunk back exactly once with its text and metadata intact, the deadline kept, and every
chunk without a model context counted alike in the summary log, the per-file warnings and the metrics.

One code path for the reliability tests (small workloads) and ``bench/reliability.py`` (full size).
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from contextual_kb.local.bedrock_standin import BedrockStandIn, Seen, StandInConfig
from contextual_kb.local.corpora import heading_dense_manual, split_at_lines
from contextual_kb.local.environment import handler_environment
from contextual_kb.runtime.deadline import Deadline, Tail

BUCKET = "reliability-intermediate"
MODEL_PREFIX = "This chunk is from"  # how the stand-in's own answers begin
SEPARATOR = "\n\n"

Chaos = Callable[[BedrockStandIn, threading.Event], None]


@dataclass(frozen=True)
class Workload:
    files: int
    chunks_per_file: int
    words: int = 60  # per chunk; 8 chunks of 320 words make a document over Haiku 4.5's cache minimum
    per_batch: int = 5
    manual_chars: int = 0  # instead of words: each file a heading-dense manual of this size, in 1.5 KB chunks

    def file_chunks(self, number: int) -> list[str]:
        if self.manual_chars:
            return split_at_lines(heading_dense_manual(self.manual_chars, seed=number), 1500)
        return words_chunks(f"topic{number}", self.chunks_per_file, self.words)


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    workload: Workload
    timeout_seconds: float = 900.0  # the Lambda's remaining time when the handler starts
    standin: dict[str, Any] = field(default_factory=dict)  # StandInConfig at the start
    env: dict[str, str] = field(default_factory=dict)  # settings (runtime/settings.py)
    chaos: Chaos | None = None  # runs beside the handler until it returns
    s3_put_failures: int = 0  # PutObject attempts answered 500 first, per output key; -1: every attempt
    s3_put_every: int = 1  # ... for one output key in this many
    s3_delay_seconds: float = 0.0  # every S3 request of the handler's batch store waits this long
    expect_failure: bool = False  # the invocation must fail, loudly, naming the object
    # A quota shared by every invocation (MODEL_QUOTA_TABLE): a fresh table on the mocked DynamoDB; the
    # quota itself is in ``env`` (MODEL_REQUESTS_PER_MINUTE, MODEL_TOKENS_PER_MINUTE).
    shared_quota: bool = False
    # Stand-in counters (StandInStats) that must be above 0, so that a fault that never fired cannot pass.
    must_see: tuple[str, ...] = ()
    # Stand-in counters, or figures of the summary line's model accounting, that must stay 0.
    must_not_see: tuple[str, ...] = ()


@dataclass
class Outcome:
    scenario: str
    chunks_in: int
    chunks_out: int = 0
    lost: int = 0
    duplicated: int = 0
    altered: int = 0
    metadata_lost: int = 0
    from_model: int = 0
    degraded: int = 0  # chunks without a model context (given the structural one)
    degraded_by_file: dict[str, int] = field(default_factory=dict)  # source file -> chunks degraded
    document_level: int = 0  # chunks given the document-level context (no time to outline their document)
    fallbacks_logged: dict[str, int] = field(default_factory=dict)  # the summary line, by reason
    fallbacks_warned: int = 0  # the per-file warning lines, summed
    fallbacks_metric: int = 0  # the ContextFallbacks metric
    seconds: float = 0.0  # wall-clock, for the benchmark's table: a loaded machine lengthens it
    timeout_seconds: float = 0.0
    hard_stop_seconds: float = 0.0  # the handler's own deadline: timeout - DEADLINE_RESERVE_SECONDS
    # What the code controls of its deadline, on its own clock (``Watch``), whatever the machine's load:
    # how far the hard stop it computed is off the Lambda's end less the reserve; whether its model time
    # ran out, and how long it went on with the model after it did; how far past its model time it let a
    # call wait for a turn of the shared quota (seconds; 0 when never).
    hard_stop_error: float = 0.0
    model_time_ran_out: bool = False
    model_overrun: float = 0.0
    quota_wait_past: float = 0.0
    quota_bookings: int = 0  # turns of the shared quota asked for (each checked as above)
    quota_turns: int = 0  # ... and given
    calls_allowed: int = 0  # the times the deadline let a call start (a busy machine can leave none)
    compute_late: float = 0.0  # CPU seconds a compute pass went on past its compute time (Watch)
    s3_most_in_flight: int = 0  # S3 requests of the handler's store at once, at most (with s3_delay_seconds)
    model: dict[str, Any] = field(default_factory=dict)  # the summary line's model accounting
    standin: dict[str, Any] = field(default_factory=dict)  # what the stand-in saw
    put_attempts: int = 0
    put_failures: int = 0
    put_most_per_object: int = 0  # the most PutObject attempts any one object got
    remembered_objects: int = 0  # remembered-context objects in the bucket after the run
    outputs_left: int = 0  # output objects in the bucket after the run
    error: str = ""  # the exception, for a scenario expected to fail
    error_logged: bool = False  # an ERROR log line with the exception, and TransformationErrors = 1

    def problems(
        self,
        expect_failure: bool = False,
        must_see: tuple[str, ...] = (),
        must_not_see: tuple[str, ...] = (),
        *,
        wall_clock: bool = False,
    ) -> list[str]:
        """Every broken promise, in words; empty when all is well. ``must_see``: the faults that must have
        happened (stand-in counters, or ``put_failures``); ``must_not_see``: what must not have (stand-in
        counters, or the model accounting's). The deadline is judged by what the code controls (the hard
        stop it computed, the model time it kept, the waits it chose), which a loaded machine does not
        change; ``wall_clock`` (the benchmark, on a quiet machine) also by the time the handler took."""
        found = []
        for name in must_see:
            seen = self.put_failures if name == "put_failures" else self.standin.get(name, 0)
            if not seen:
                found.append(f"the fault never happened: {name} = 0")
        for name in must_not_see:
            if seen := self.standin.get(name, self.model.get(name, 0)):
                found.append(f"{name} = {seen}, expected none")
        if expect_failure:
            if not self.error or not self.error_logged:
                found.append(f"expected a loud failure, got error={self.error!r} logged={self.error_logged}")
            return found
        if self.error:
            return [f"failed: {self.error}"]
        for name in ("lost", "duplicated", "altered", "metadata_lost"):
            if getattr(self, name):
                found.append(f"{getattr(self, name)} chunk(s) {name.replace('_', ' ')}")
        if self.chunks_out != self.chunks_in:
            found.append(f"{self.chunks_out} chunks out of {self.chunks_in} in")
        found.extend(self.deadline_problems())
        if wall_clock and self.seconds >= self.timeout_seconds:
            found.append(
                f"returned after {self.seconds:.1f} s, past the {self.timeout_seconds:.0f} s timeout"
            )
        counted = {sum(self.fallbacks_logged.values()), self.fallbacks_warned, self.fallbacks_metric}
        if counted != {self.degraded}:
            found.append(
                f"{self.degraded} degraded chunk(s), counted {sum(self.fallbacks_logged.values())} in the "
                f"summary, {self.fallbacks_warned} in warnings, {self.fallbacks_metric} in metrics"
            )
        return found

    def deadline_problems(self) -> list[str]:
        """The deadline's promises the code keeps whatever the machine's load: a hard stop at the Lambda's
        end less the reserve; the structural pass stopped once its compute time ran out; the model given up
        once its time ran out (the engine looks at the deadline every half second, ``engine._WAIT_SLICE``);
        no wait for a quota turn allowed past the model's time."""
        found = []
        if abs(self.hard_stop_error) > HARD_STOP_TOLERANCE:
            found.append(
                f"the handler's hard stop is {self.hard_stop_error:+.2f} s off the Lambda's end less "
                "DEADLINE_RESERVE_SECONDS"
            )
        if self.compute_late > COMPUTE_LATE_TOLERANCE:
            found.append(f"a compute pass went on {self.compute_late:.1f} s of its CPU past its compute time")
        if self.model_overrun > MODEL_OVERRUN_TOLERANCE:
            found.append(f"the model was waited for {self.model_overrun:.1f} s past its own time")
        if self.quota_wait_past > QUOTA_WAIT_TOLERANCE:
            found.append(
                f"a call was let wait for a quota turn {self.quota_wait_past:.1f} s past the model's time"
            )
        return found

    def as_row(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "chunks": self.chunks_in,
            "lost": self.lost + self.duplicated + self.altered + self.metadata_lost,
            "from model": self.from_model,
            "degraded": self.degraded,
            "reasons": ", ".join(f"{k} {v}" for k, v in sorted(self.fallbacks_logged.items())) or "-",
            "seconds": round(self.seconds, 1),
            "timeout": self.timeout_seconds,
            "calls": self.standin.get("requests", 0),
            "429": self.standin.get("throttled", 0),
            "5xx": self.standin.get("faults", 0),
            "hangs": self.standin.get("hangs", 0),
            "cache writes": self.standin.get("cache_writes", 0),
        }


# What the deadline checks allow (seconds). The hard stop is read from the context a few instructions before
# the clock; the engine looks at its model time every 0.5 s, a thread may wake late on a loaded machine; a
# quota wait is bounded by the model time when the call starts, and the tail's estimate may grow meanwhile.
HARD_STOP_TOLERANCE = 0.1
MODEL_OVERRUN_TOLERANCE = 1.0
# Seconds of the pass's own CPU (Watch.compute_late). The structural pass looks at its compute time every
# 4,096 lines of outline and every 256 chunks: it went on 0.02-0.22 s of CPU past it in the heading-dense
# scenario, 0.9-1.0 s with its looks taken out (docs/RELIABILITY.md, "Fault injection, end to end").
COMPUTE_LATE_TOLERANCE = 0.5
QUOTA_WAIT_TOLERANCE = 0.5


@dataclass
class _Pass:
    """A compute pass under way on one thread, on that thread's CPU clock."""

    left: float  # compute time left (seconds) at the last look that found some, or at the start
    looked: float  # the thread's CPU time then
    ran_out: float | None = None  # the thread's CPU time when a look first found none left


@dataclass
class Watch:
    """What the handler's deadline saw, on its own clock: when the model's time ran out as the code looked
    at it, and when it last looked (the model loop looks at it until the model is given up)."""

    deadline: Deadline | None = None  # the budgeted one (the tail known), once the handler made it
    made_at: float = 0.0  # when the handler made it
    model_time_up: float | None = None
    last_model_look: float | None = None
    quota_wait_past: float = 0.0
    quota_bookings: int = 0
    quota_turns: int = 0
    calls_allowed: int = 0
    # How much work a compute pass (the structural contexts, the rechunking) did past its compute time, in
    # seconds of its own thread's CPU (``cpu_clock``): what a loaded machine does not lengthen, as the
    # wall-clock seconds past it are (a thread left waiting for a core ran 1.7-2.9 s past in busy runs).
    compute_late: float = 0.0
    cpu_clock: Callable[[], float] = time.thread_time
    passes: threading.local = field(default_factory=threading.local)  # the pass under way on each thread
    in_flight: int = 0
    most_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def report(self, outcome: Outcome, expected_hard_stop: float) -> None:
        if self.deadline is not None:
            # Less time left than the reserve when the handler started (a slow start): a hard stop at once.
            outcome.hard_stop_error = self.deadline.hard_stop - max(expected_hard_stop, self.made_at)
        outcome.model_time_ran_out = self.model_time_up is not None
        if self.model_time_up is not None and self.last_model_look is not None:
            outcome.model_overrun = self.last_model_look - self.model_time_up
        outcome.quota_wait_past = max(0.0, self.quota_wait_past)
        outcome.quota_bookings, outcome.quota_turns = self.quota_bookings, self.quota_turns
        outcome.calls_allowed = self.calls_allowed
        outcome.compute_late = self.compute_late
        outcome.s3_most_in_flight = self.most_in_flight

    def pass_started(self, left: float) -> None:
        """A compute pass starts on this thread with ``left`` of its compute time."""
        self.passes.current = _Pass(max(0.0, left), self.cpu_clock())

    def looked_at_compute(self, left: float) -> None:
        """The code looked at its compute time (``left``). The first look that finds none left is judged:
        the CPU the pass spent since the last look that found some, less what was left then, is work it
        did past its compute time before it saw so."""
        current: _Pass | None = getattr(self.passes, "current", None)
        if current is None or current.ran_out is not None:
            return  # a look outside a pass (the engine deciding what to start) is the model time's business
        now = self.cpu_clock()
        if left > 0:
            current.left, current.looked = left, now
        else:
            current.ran_out = now
            self._late(now - current.looked - current.left)

    def pass_ended(self) -> None:
        """A pass ended (or was given up): once a look found no time left, all it did after is past its
        compute time (the document-level context for the rest: a little); a pass that never found its time
        run out is judged as at a look, whether or not it looked at all."""
        current: _Pass | None = getattr(self.passes, "current", None)
        if current is None:
            return
        self.passes.current = None
        now = self.cpu_clock()
        self._late(now - (current.ran_out if current.ran_out is not None else current.looked + current.left))

    @contextlib.contextmanager
    def compute_pass(self, deadline: Deadline | None) -> Iterator[None]:
        """A compute pass under ``deadline`` (none: not judged), from its start to its end."""
        if deadline is None:
            yield
            return
        self.pass_started(Deadline.compute_remaining(deadline))  # the class's: not a look of the code's
        try:
            yield
        finally:
            self.pass_ended()

    def _late(self, seconds: float) -> None:
        with self.lock:
            self.compute_late = max(self.compute_late, seconds)

    def looked(self, now: float, left: float) -> None:
        if left <= 0 and self.model_time_up is None:
            self.model_time_up = now
        if self.model_time_up is not None:
            self.last_model_look = now


@dataclass(frozen=True, slots=True)
class _WatchedDeadline(Deadline):
    """The handler's own ``Deadline``, telling ``watch`` when the code looks at its model time."""

    watch: Watch | None = field(default=None, compare=False)

    def budgeted(self, tail: Tail) -> Deadline:
        budgeted = replace(self, tail=tail)
        if self.watch is not None:
            self.watch.deadline = budgeted
        return budgeted

    def remaining(self) -> float:
        left = Deadline.remaining(self)
        if self.watch is not None:
            self.watch.looked(self.clock(), left)
        return left

    def can_start(self, expected_seconds: float) -> bool:
        allowed = Deadline.can_start(self, expected_seconds)
        if allowed and self.watch is not None:
            with self.watch.lock:
                self.watch.calls_allowed += 1
        return allowed

    def compute_remaining(self) -> float:
        left = Deadline.compute_remaining(self)
        if self.watch is not None:
            self.watch.looked_at_compute(left)
        return left


class _WatchedDeadlines:
    """Stands for ``Deadline`` in the handler's module while a scenario runs: the deadline it makes is
    watched."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch

    def from_remaining(self, remaining_seconds: float, *, reserve_seconds: float) -> Deadline:
        self.watch.made_at = time.monotonic()
        made = Deadline.from_remaining(remaining_seconds, reserve_seconds=reserve_seconds)
        watched = _WatchedDeadline(made.hard_stop, made.clock, watch=self.watch)
        self.watch.deadline = watched
        return watched


@contextlib.contextmanager
def watching(watch: Watch, timeout_seconds: float) -> Iterator[None]:
    """The handler's deadline watched, and every booking of a shared quota's turn checked against the
    model's time when it is booked (the latest a call may wait is the code's choice: ``give_up_at``).

    The quota's table here is moto in this process, sharing the interpreter with the handler's threads and
    the stand-in: its round trip measures the machine, not DynamoDB (a loaded machine took over 2 s a booking
    and the table was skipped as slow). So a booking counts as slow only past the Lambda's whole time; the
    slow-table rule itself is tested on an injected clock (tests/unit/test_shared_quota.py)."""
    from contextual_kb.runtime import handler, transform
    from contextual_kb.runtime.context.base import ChunkContext
    from contextual_kb.runtime.context.claude import shared_quota
    from contextual_kb.runtime.context.claude.shared_quota import SharedQuota
    from contextual_kb.runtime.context.structural import StructuralStrategy

    book = SharedQuota.book

    def watched_book(quota: SharedQuota, tokens: int, give_up_at: float) -> Any:
        deadline = watch.deadline
        if deadline is not None:
            model_ends = time.time() + max(0.0, Deadline.remaining(deadline))  # epoch, as give_up_at
            with watch.lock:
                watch.quota_wait_past = max(watch.quota_wait_past, give_up_at - model_ends)
                watch.quota_bookings += 1
        booking = book(quota, tokens, give_up_at)  # NoTurnError: none given before give_up_at
        with watch.lock:
            watch.quota_turns += 1
        return booking

    # The compute passes, each judged on its thread's CPU clock (Watch.pass_started, pass_ended).
    contexts_for, chunk_document = StructuralStrategy.contexts_for, transform.chunk_document

    def watched_contexts_for(
        strategy: StructuralStrategy, document: Any, deadline: Deadline | None = None
    ) -> list[ChunkContext | None]:
        with watch.compute_pass(deadline):
            return contexts_for(strategy, document, deadline)

    def watched_chunk_document(*args: Any, **kwargs: Any) -> Any:
        with watch.compute_pass(watch.deadline):
            return chunk_document(*args, **kwargs)

    handler.Deadline = _WatchedDeadlines(watch)  # type: ignore[attr-defined,assignment]
    SharedQuota.book = watched_book  # type: ignore[method-assign,assignment]
    StructuralStrategy.contexts_for = watched_contexts_for  # type: ignore[method-assign]
    transform.chunk_document = watched_chunk_document  # type: ignore[attr-defined]
    slow_booking, shared_quota.BOOKING_SECONDS = shared_quota.BOOKING_SECONDS, timeout_seconds
    try:
        yield
    finally:
        handler.Deadline = Deadline  # type: ignore[attr-defined,misc]
        SharedQuota.book = book  # type: ignore[method-assign]
        StructuralStrategy.contexts_for = contexts_for  # type: ignore[method-assign]
        transform.chunk_document = chunk_document  # type: ignore[attr-defined]
        shared_quota.BOOKING_SECONDS = slow_booking


# --- chaos: what changes while the handler runs ---


def throttle_storm(share: float, seconds: float) -> Chaos:
    """``share`` of the calls answered 429 for ``seconds``, then none."""

    def chaos(standin: BedrockStandIn, done: threading.Event) -> None:
        standin.configure(throttle_rate=share)
        done.wait(seconds)
        standin.configure(throttle_rate=0.0)

    return chaos


def server_error_bursts(every: float, lasting: float) -> Chaos:
    """Every ``every`` seconds, all calls answered 500 or 503 for ``lasting`` seconds."""

    def chaos(standin: BedrockStandIn, done: threading.Event) -> None:
        while not done.is_set():
            standin.configure(fault_rate=1.0)
            done.wait(lasting)
            standin.configure(fault_rate=0.0)
            done.wait(every - lasting)

    return chaos


def cache_expiry(every: float) -> Chaos:
    """The stand-in forgets every cached prefix every ``every`` seconds (as if the 5-minute TTL ran out)."""

    def chaos(standin: BedrockStandIn, done: threading.Event) -> None:
        while not done.wait(every):
            standin.expire_cache()

    return chaos


def failing_document(text: str, status: int = 500) -> Callable[[Seen], int | None]:
    """A fault that belongs to one document: every call whose document holds ``text`` is answered
    ``status``, the others as usual."""

    def fault_for(seen: Seen) -> int | None:
        return status if text in seen.document else None

    return fault_for


def malformed_answers(every: int = 3) -> Callable[[Seen], str | None]:
    """A responder: one call in ``every`` answered with nothing, blanks, the chunk echoed back, or a wrapper
    with no text in it; the rest the stand-in's own answer."""
    bad = ("", "   \n\t ", None, "<context></context>")
    count = iter(range(1 << 30))

    def responder(seen: Seen) -> str | None:
        n = next(count)
        if n % every:
            return None
        choice = bad[(n // every) % len(bad)]
        return seen.document if choice is None else choice  # None: an echo of the whole document

    return responder


# --- running one scenario ---


def words_chunks(topic: str, count: int, words: int) -> list[str]:
    return [
        f"{topic.title()} part {i}. " + " ".join(f"{topic}{i}w{j}" for j in range(words))
        for i in range(count)
    ]


def run(scenario: Scenario, standin: BedrockStandIn) -> Outcome:
    """Stage the workload on the (already mocked) S3, run the handler with the scenario's faults, check."""
    import boto3

    from contextual_kb.local import runner
    from contextual_kb.local.lambda_context import LocalLambdaContext
    from contextual_kb.runtime import handler

    s3 = boto3.client("s3")
    event, total = _stage(s3, scenario.workload)
    outcome = Outcome(scenario.name, chunks_in=total, timeout_seconds=scenario.timeout_seconds)
    watch = Watch()
    standin.configure(**scenario.standin)
    env = dict(scenario.env)
    if scenario.shared_quota:
        from contextual_kb.local.quota_table import create_quota_table

        table = f"reliability-quota-{time.time_ns()}"
        env["MODEL_QUOTA_TABLE"] = create_quota_table(boto3.client("dynamodb"), table)
    with handler_environment(CONTEXT_STRATEGY="claude", ANTHROPIC_BEDROCK_BASE_URL=standin.url, **env):
        settings, _, store = handler.runtime()
        outcome.hard_stop_seconds = scenario.timeout_seconds - settings.deadline_reserve_seconds
        counter = _PutFaults(scenario.s3_put_failures, scenario.s3_put_every)
        store._client.meta.events.register_first("before-send.s3.PutObject", counter)
        if scenario.s3_delay_seconds:
            store._client.meta.events.register("before-send.s3", _delay(scenario.s3_delay_seconds, watch))
        context = LocalLambdaContext(timeout_seconds=scenario.timeout_seconds)  # type: ignore[arg-type]
        # The Lambda's end less the reserve, on the deadline's clock: what the handler's hard stop must be.
        expected_hard_stop = context._started + scenario.timeout_seconds - settings.deadline_reserve_seconds
        done = threading.Event()
        chaos = (
            threading.Thread(target=scenario.chaos, args=(standin, done), name="chaos", daemon=True)
            if scenario.chaos
            else None
        )
        if chaos:
            chaos.start()
        try:
            with watching(watch, scenario.timeout_seconds):
                result = runner.invoke(event, context, fresh=False)
        except runner.HandlerError as exc:
            outcome.error = str(exc)
            outcome.seconds = scenario.timeout_seconds - context.get_remaining_time_in_millis() / 1000
            outcome.error_logged = _failure_logged(exc.log, str(exc))
            result = None
        finally:
            done.set()
            if chaos:
                chaos.join(timeout=5)
    watch.report(outcome, expected_hard_stop)
    outcome.put_attempts, outcome.put_failures = counter.attempts, counter.failures
    outcome.put_most_per_object = max((n for n in counter.by_key.values() if n > 0), default=0)
    _count_objects(outcome, s3, settings)
    outcome.standin = standin.stats.as_dict()
    if result is not None:
        outcome.seconds = result.seconds
        _check_outputs(outcome, result)
        _count_reports(outcome, result.log)
    return outcome


def _count_objects(outcome: Outcome, s3: Any, settings: Any) -> None:
    """The remembered-context objects and the outputs the run left in the bucket."""
    listed = s3.list_objects_v2(
        Bucket=BUCKET, Prefix=settings.context_memory_prefix or "contextual-kb/contexts/"
    )
    outcome.remembered_objects = listed.get("KeyCount", 0)
    # Outputs lie under the batch keys' shared directory: any key holding the output prefix is one.
    listed_all = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
        for o in page.get("Contents", [])
    ]
    outcome.outputs_left = sum(1 for key in listed_all if settings.output_prefix in key)


def _stage(s3: Any, load: Workload) -> tuple[dict[str, Any], int]:
    """The workload's files as the KB would stage them, with metadata to keep; the event and its chunks."""
    from contextual_kb.local.kb_staging import build_event, stage_file

    s3.create_bucket(Bucket=BUCKET)
    staged = []
    for f in range(load.files):
        chunks = load.file_chunks(f)
        metadata = [
            {"page": i, "tags": ["reliability", f"file{f}"], "nested": {"owner": f"team{f % 3}"}}
            for i in range(len(chunks))
        ]
        staged.append(
            stage_file(
                s3,
                BUCKET,
                f"s3://reliability-source/docs/file{f}.md",
                chunks,
                chunks_per_batch=load.per_batch,
                file_metadata={"collection": "reliability"},
                chunk_metadata=metadata,
            )
        )
    return build_event(BUCKET, staged), sum(len(f.chunks) for f in staged)


def _delay(seconds: float, watch: Watch) -> Callable[..., None]:
    """A botocore ``before-send`` hook: S3 answering slowly (the request then goes on as usual); how many
    requests wait at once, at most, is counted."""

    def hook(**_: Any) -> None:
        with watch.lock:
            watch.in_flight += 1
            watch.most_in_flight = max(watch.most_in_flight, watch.in_flight)
        try:
            time.sleep(seconds)
        finally:
            with watch.lock:
                watch.in_flight -= 1

    return hook


def _check_outputs(outcome: Outcome, result: Any) -> None:
    seen_keys: set[str] = set()
    for given, produced in zip(result.event["inputFiles"], result.response["outputFiles"], strict=True):
        source = given["originalFileLocation"]["s3_location"]["uri"]
        in_keys = [b["key"] for b in given["contentBatches"]]
        out_keys = [b["key"] for b in produced["contentBatches"]]
        if len(out_keys) != len(in_keys) or seen_keys & set(out_keys):
            outcome.duplicated += abs(len(out_keys) - len(in_keys))
        seen_keys |= set(out_keys)
        for in_key, out_key in zip(in_keys, out_keys, strict=False):
            before = result.before[in_key].file_contents
            after = result.after[out_key].file_contents
            outcome.lost += max(0, len(before) - len(after))
            outcome.duplicated += max(0, len(after) - len(before))
            for original, item in zip(before, after, strict=False):
                outcome.chunks_out += 1
                body = item.content_body
                if not body.endswith(original.content_body):
                    outcome.altered += 1
                    continue
                kept = item.content_metadata or {}
                if any(kept.get(k) != v for k, v in (original.content_metadata or {}).items()):
                    outcome.metadata_lost += 1
                context = body[: len(body) - len(original.content_body)].removesuffix(SEPARATOR)
                if context.startswith(MODEL_PREFIX):
                    outcome.from_model += 1
                else:
                    outcome.degraded += 1
                    outcome.degraded_by_file[source] = outcome.degraded_by_file.get(source, 0) + 1


def _count_reports(outcome: Outcome, log: str) -> None:
    for line in _json_lines(log):
        if line.get("message") == "transformation complete":
            outcome.model = line.get("model", {})
            outcome.fallbacks_logged = dict(outcome.model.get("fallbacks", {}))
            outcome.document_level = int(line.get("contexts_by_source", {}).get("structural_document", 0))
        elif str(line.get("message", "")).startswith("chunks given the structural context"):
            outcome.fallbacks_warned += int(line.get("chunks", 0))
        elif "_aws" in line and "ContextFallbacks" in line:
            outcome.fallbacks_metric += int(_metric_value(line["ContextFallbacks"]))


def _failure_logged(log: str, message: str) -> bool:
    lines = list(_json_lines(log))
    # The whole message (it names the object, s3://bucket/key) in an ERROR line's exception.
    logged = any(line.get("level") == "ERROR" and message in str(line.get("exception", "")) for line in lines)
    counted = any(
        "_aws" in line and _metric_value(line.get("TransformationErrors", 0)) == 1 for line in lines
    )
    return logged and counted


def _metric_value(value: Any) -> float:
    return float(value[0] if isinstance(value, list) else value)


def _json_lines(log: str) -> Iterator[dict[str, Any]]:
    for line in log.splitlines():
        if line.startswith("{"):
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


class _PutFaults:
    """A botocore ``before-send`` hook: the first ``failures`` attempts of one PutObject key in ``every``
    answered 500 (all of them for -1). The SDK's retry logic sees a real 500. (moto's own hook still runs
    and stores the object, as S3 may have done behind a 500; the caller is told it failed.)"""

    def __init__(self, failures: int, every: int = 1) -> None:
        self.failures_per_key = failures
        self.every = every
        self.by_key: dict[str, int] = {}
        self.attempts = 0
        self.failures = 0
        self._lock = threading.Lock()

    def __call__(self, request: Any, **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse

        with self._lock:
            self.attempts += 1
            key = request.url.split("?")[0]
            if key not in self.by_key and len(self.by_key) % self.every:
                self.by_key[key] = -1  # a key spared
            tried = self.by_key.setdefault(key, 0)
            if tried < 0:
                return None
            self.by_key[key] = tried + 1
            if self.failures_per_key != -1 and tried >= self.failures_per_key:
                return None
            self.failures += 1
        body = b"<Error><Code>InternalError</Code><Message>injected</Message></Error>"
        return AWSResponse(request.url, 500, {"Content-Type": "application/xml"}, _Raw(body))


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = io.BytesIO(body)

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body.read()

    def read(self, *_: Any, **__: Any) -> bytes:
        return self._body.read()


# --- the catalogue ---

FULL = "full"  # the sizes the issue names (bench/reliability.py)
QUICK = "quick"  # the same faults, scaled to seconds (make test)


def scenarios(scale: str = QUICK) -> list[Scenario]:
    """Every fault scenario. ``full``: a one-minute storm, 500 chunks against 60 s, realistic latency;
    ``quick``: the same shapes in a few seconds each."""
    full = scale == FULL
    # Documents of 8 chunks x 320 words are over Haiku 4.5's 4,096-token cache minimum: cache behaviour runs.
    cached = Workload(files=12 if full else 4, chunks_per_file=8, words=320, per_batch=4)
    many = Workload(files=50 if full else 10, chunks_per_file=10)
    fast_retries = {"MODEL_MAX_RETRIES": "2"} if not full else {}
    below_one_request = Scenario(
        "quota below one request",
        "a quota of 1 request a minute (shared with the fleet: less than one each), 100 chunks, 60 s left"
        if full
        else "a quota of 1 request a minute, 100 chunks, 6 s left",
        many if not full else Workload(files=10, chunks_per_file=10),
        timeout_seconds=60.0 if full else 6.0,
        standin={"rpm": 1, "window": "bucket", "burst_seconds": 1.0, "latency_ms": 300.0 if full else 5.0},
        env={"DEADLINE_RESERVE_SECONDS": "5" if full else "1", **fast_retries},
        must_see=("throttled",),
    )
    return [
        Scenario(
            "baseline",
            "no fault",
            many,
            standin={"latency_ms": 300.0 if full else 2.0},
        ),
        Scenario(
            "throttling storm",
            "half the calls answered 429 for a minute" if full else "half the calls answered 429 for 3 s",
            Workload(files=120, chunks_per_file=10) if full else many,
            standin={"latency_ms": 300.0 if full else 20.0},
            env={"MAX_CONCURRENCY": "8"} if full else {"MAX_CONCURRENCY": "4", **fast_retries},
            chaos=throttle_storm(0.5, 60.0 if full else 3.0),
            must_see=("throttled",),
        ),
        Scenario(
            "5xx bursts",
            "every 5 s, all calls answered 500 or 503 for 1 s" if full else "every 1 s, all 5xx for 0.15 s",
            Workload(files=60, chunks_per_file=10) if full else many,
            standin={"latency_ms": 300.0 if full else 50.0},
            env={"MAX_CONCURRENCY": "8" if full else "4"},
            chaos=server_error_bursts(5.0, 1.0) if full else server_error_bursts(1.0, 0.15),
            must_see=("faults",),
        ),
        Scenario(
            "hanging calls",
            "1 call in 5 hangs past the model timeout",
            many,
            standin={
                "hang_rate": 0.2,
                "hang_seconds": 60.0 if full else 5.0,
                "latency_ms": 300.0 if full else 2.0,
            },
            env={"MODEL_TIMEOUT_SECONDS": "5" if full else "0.5", "MODEL_MAX_RETRIES": "2"},
            must_see=("hangs",),
        ),
        Scenario(
            "slow model, short time",
            "500 chunks, 60 s left, 8 s a call" if full else "200 chunks, 6 s left, 1 s a call",
            Workload(files=50, chunks_per_file=10) if full else Workload(files=20, chunks_per_file=10),
            timeout_seconds=60.0 if full else 6.0,
            standin={"latency_ms": 8000.0 if full else 1000.0},
            env={"DEADLINE_RESERVE_SECONDS": "30" if full else "2", "MAX_CONCURRENCY": "16" if full else "8"},
        ),
        Scenario(
            "slow S3, long tail",
            "200 files of 4 batches, S3 at 50 ms a request, a slow model, a 36 s Lambda"
            if full
            else "60 files of 4 batches, S3 at 40 ms a request, a slow model, a 16 s Lambda",
            Workload(files=200 if full else 60, chunks_per_file=20, words=60, per_batch=5),
            timeout_seconds=36.0 if full else 16.0,
            standin={"latency_ms": 2000.0 if full else 300.0},
            env={"MAX_CONCURRENCY": "16" if full else "8", "DEADLINE_RESERVE_SECONDS": "2"},
            s3_delay_seconds=0.05 if full else 0.04,
        ),
        Scenario(
            "heading-dense document, short time",
            "a 20 MB manual with a heading every few lines, a slow model, a 30 s Lambda"
            if full
            else "a 12 MB manual with a heading every few lines, a slow model, a 2.5 s Lambda",
            Workload(
                files=1, chunks_per_file=0, manual_chars=20_000_000 if full else 12_000_000, per_batch=500
            ),
            timeout_seconds=30.0 if full else 2.5,
            standin={"latency_ms": 5000.0 if full else 2000.0},
            env={"DEADLINE_RESERVE_SECONDS": "2" if full else "1", "CONTEXT_MEMORY_PREFIX": ""},
        ),
        Scenario(
            "one failing document",
            "every call on the first of 6 documents answered 500, the others as usual",
            Workload(files=6, chunks_per_file=20),
            standin={"latency_ms": 300.0 if full else 5.0, "fault_for": failing_document("Topic0 part 0.")},
            env={"MODEL_MAX_RETRIES": "0", "MAX_CONCURRENCY": "8"},
            must_see=("faults",),
        ),
        below_one_request,
        # the same, the quota given to share (MODEL_QUOTA_TABLE): turns waited for instead of 429s
        replace(
            below_one_request,
            name="quota below one request, shared",
            description="the same quota shared through its table (MODEL_QUOTA_TABLE): calls wait for turns, "
            "not 429s",
            env={**below_one_request.env, "MODEL_REQUESTS_PER_MINUTE": "1"},
            shared_quota=True,
            must_see=(),
            must_not_see=("throttled", "attempts_without_turns"),  # turns kept the calls, the table worked
        ),
        Scenario(
            "throttled for a minute",
            "every call answered 429 for a minute, then none" if full else "every call answered 429 for 3 s",
            many,
            standin={"latency_ms": 300.0 if full else 5.0},
            env={"MAX_CONCURRENCY": "8" if full else "4", **fast_retries},
            chaos=throttle_storm(1.0, 60.0 if full else 3.0),
            must_see=("throttled",),
        ),
        Scenario(
            "malformed answers",
            "1 answer in 3 empty, blank, an echo of the document or an empty wrapper",
            many,
            standin={"responder": malformed_answers(3), "latency_ms": 300.0 if full else 2.0},
        ),
        Scenario(
            "cache expiring mid-run",
            "every cached prefix forgotten every 2 s"
            if full
            else "every cached prefix forgotten every 0.2 s",
            cached,
            standin={"latency_ms": 300.0 if full else 50.0},
            env={"MAX_CONCURRENCY": "4", "CONTEXT_MEMORY_PREFIX": ""},
            chaos=cache_expiry(2.0 if full else 0.2),
        ),
        Scenario(
            "S3 writes failing, then succeeding",
            "the first 2 attempts of 1 output write in 5 answered 500",
            many,
            standin={"latency_ms": 2.0},
            env={"S3_MAX_ATTEMPTS": "3"},
            s3_put_failures=2,
            must_see=("put_failures",),
            s3_put_every=5,
        ),
        Scenario(
            "S3 writes failing for good",
            "every output write answered 500",
            many,
            standin={"latency_ms": 2.0},
            env={"S3_MAX_ATTEMPTS": "3"},
            s3_put_failures=-1,
            must_see=("put_failures",),
            expect_failure=True,
        ),
        *(
            [
                # botocore's standard retry quota (500 tokens, 5 a retry, 1 back per success) runs out after
                # about 100 retries without successes between them: the SDK stops retrying, and so do we.
                Scenario(
                    "S3 writes failing twice each",
                    "the first 2 attempts of every output write answered 500: the retry quota runs out",
                    many,
                    standin={"latency_ms": 2.0},
                    env={"S3_MAX_ATTEMPTS": "3"},
                    s3_put_failures=2,
                    must_see=("put_failures",),
                    expect_failure=True,
                )
            ]
            if full
            else []
        ),
    ]


def standin_config(**changes: Any) -> StandInConfig:
    """A stand-in for scenarios: fast unless a scenario slows it."""
    return StandInConfig(**{"latency_ms": 2.0, "per_token_ms": 0.0, **changes})
