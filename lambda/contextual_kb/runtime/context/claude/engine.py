"""``CONTEXT_STRATEGY=claude``: a context per chunk from Claude on Bedrock, cheap and fast enough for corpora.

The engine, per invocation:
- documents are taken lazily and results yielded in order; several documents are open at once (bounded by
  count and characters) so calls on different documents run side by side up to ``MAX_CONCURRENCY``;
- remembered contexts (S3) are looked up first; a chunk found there needs no call;
- each document (or window of a long one) is a unit with a cached prefix; its first call runs alone
  (``scheduling``), the rest after it, so a cacheable document is written to the cache once;
- the SDK retries 429s, 5xx and timeouts; each 429 also shrinks the concurrency limit; a call still
  throttled waits (with backoff) at the back of its queue, one still failing is tried again; a breaker stops
  calling a model that keeps failing (``flow_control``);
- with a quota shared by every invocation (``MODEL_QUOTA_TABLE``), each call first waits its turn of it, in
  the quota's own units (``shared_quota``); one given no turn in time is handled as a throttled call;
- no call starts unless it can end before the deadline; at the deadline calls still running are abandoned;
- a document whose own calls keep failing is contained: it goes after healthy ones, one call at a time, its
  failures alone do not open the breaker, and after ``DOCUMENT_FAILURE_LIMIT`` failures in a row it is
  given up on (its chunks get the fallback) while the others carry on;
- what comes back is checked as untrusted text, remembered contexts read back as strictly as answers, and a
  failure on one chunk's context is that chunk's fallback, never the call's;
- every chunk left without a model context gets the structural context, counted by reason and logged with
  its file and batch keys; with ``ON_MODEL_ERROR=fail`` a model failure raises instead;
- ``CONTEXT_DEFER``: a document with such chunks is recorded as pending (``runtime/pending.py``) for
  ``ckb contextualize`` to give them model contexts later; with ``always`` no model is called here at all
  (remembered contexts are still used), and every chunk without one is deferred.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from contextual_kb.runtime.context.base import (
    ChunkContext,
    ContextStrategy,
    DocumentContexts,
    Invocation,
    SourceDocument,
)
from contextual_kb.runtime.context.claude.accounting import ModelAccounting, percentile
from contextual_kb.runtime.context.claude.answers import check_answer, normalize
from contextual_kb.runtime.context.claude.client import ClaudeClient, ModelCallError, Reply, resolve_region
from contextual_kb.runtime.context.claude.flow_control import AdaptiveLimit, Breaker
from contextual_kb.runtime.context.claude.memory import ContextMemory, Remembered, document_key, place_key
from contextual_kb.runtime.context.claude.pricing import min_cache_tokens, output_burndown, prices_for
from contextual_kb.runtime.context.claude.prompts import (
    GROUPED_PROMPT_VERSION,
    PromptSettings,
    chunk_request,
    grouped_request,
    marked_unit,
    marker_code,
    parse_grouped,
)
from contextual_kb.runtime.context.claude.scheduling import Job, Planner
from contextual_kb.runtime.context.claude.shared_quota import (
    OutputShare,
    QuotaRate,
    SharedQuota,
    booked_tokens,
    kept_tokens,
    reserved_tokens,
    unlisted_rpm,
)
from contextual_kb.runtime.context.claude.windows import Unit, estimate_tokens, plan_units
from contextual_kb.runtime.context.structural import StructuralStrategy
from contextual_kb.runtime.deadline import Deadline
from contextual_kb.runtime.errors import ModelError, TransformationError
from contextual_kb.runtime.observability import logger
from contextual_kb.runtime.pending import PendingStore, PromptSnapshot, pending_key, record
from contextual_kb.runtime.settings import Settings

NAME = "claude"
# A job failing transiently this many times (each after the SDK's own retries) gives its chunks the fallback.
MAX_JOB_ATTEMPTS = 3
# Open documents are bounded by count and by characters held (the caller also holds their batch objects,
# and each open document costs about 3x its text). One document always opens, however large; more open only
# within this budget, so memory follows the largest file, not the number of files (docs/RELIABILITY.md:
# 2M characters took the same time as 64M on 160 files, with 40% less memory). Up to MIN_OPEN documents
# open within the larger budget, so that mid-sized documents (each a cached unit whose first call runs
# alone) still keep several first calls in flight.
MAX_OPEN_CHARS = 2 * 1024 * 1024
MIN_OPEN = 4
MIN_OPEN_CHARS = 16 * 1024 * 1024
MEMORY_THREADS = 4
_WAIT_SLICE = 0.5  # seconds; the loop looks at the deadline and the breaker at least this often
_LOGGED_INDICES = 50
# A job still throttled after the SDK's retries waits before it is tried again, at most this many times; the
# deadline bounds it in Lambda, this bounds it everywhere (about 2-4 minutes of throttling). The wait is
# "full jitter" (uniform up to a doubling ceiling) capped at a few seconds: a quota refills every second,
# and a job that had waited 30 s (the cap this had before) lost its turn to calls that never waited, so one
# invocation of a fleet straggled on while the quota went unused (docs/BENCHMARKS.md, issue 25).
MAX_THROTTLED_CALLS = 40
_THROTTLE_PAUSE = 1.0
_MAX_THROTTLE_PAUSE = 4.0
_RECENT_CALLS = 200  # the expected duration of a call is the p95 of this many recent ones
# A document whose calls failed this many times in a row (each after the SDK's retries), while others
# succeed, is given up on: its chunks get the fallback, and its calls no longer take the model's time.
DOCUMENT_FAILURE_LIMIT = 2 * MAX_JOB_ATTEMPTS
# Fallback reasons that are model failures (``ON_MODEL_ERROR=fail`` raises on them).
MODEL_FAILURES = frozenset({"model_error", "model_rejected", "model_unavailable", "model_throttled"})
DEFERRED = "deferred"  # CONTEXT_DEFER=always: no call made here, the context is made later


class ClaudeStrategy(ContextStrategy):
    name = NAME

    def __init__(
        self,
        settings: Settings,
        *,
        client: ClaudeClient | None = None,
        memory: ContextMemory | None = None,
        pending: PendingStore | None = None,
    ) -> None:
        self.settings = settings
        self._pending = pending
        self.published = settings.context_mode == "published"
        self.grouped = settings.context_mode == "grouped"
        # auto: per-chunk calls where the document's prefix is cached (long enough, more than one call),
        # grouped calls where it cannot be (each per-chunk call would pay the whole document again).
        self.auto = settings.context_mode == "auto"
        self.prompt = PromptSettings(
            model_id=settings.model_id,
            instruction=settings.context_instruction,
            glossary=settings.glossary,
            cache_ttl=settings.cache_ttl,
            context_max_tokens=settings.context_max_tokens,
        )
        self.fingerprint = self.prompt.fingerprint(
            settings.context_mode,
            settings.group_size if self.grouped or self.auto else 0,
            GROUPED_PROMPT_VERSION if self.grouped or self.auto else "",
            settings.max_document_tokens,
            settings.window_tokens,
            settings.opening_tokens,
            settings.context_max_chars,
        )
        self.min_cache_tokens = min_cache_tokens(settings.model_id, settings.min_cache_tokens)
        self.prices = prices_for(settings.model_id, settings.model_prices)
        # The published algorithm is sequential; ours runs up to MAX_CONCURRENCY calls.
        self.concurrency = 1 if self.published else settings.max_concurrency
        self.limit = AdaptiveLimit(self.concurrency)  # kept across warm invocations: it learns the quota
        # Calls take turns of a quota shared with every invocation (shared_quota.py); the published
        # algorithm makes one call at a time, as published. One per environment, as the client.
        self.quota = self._shared_quota()
        self.output_burndown = output_burndown(settings.model_id, settings.model_output_burndown)
        self.output_share = OutputShare()  # of max_tokens, what replies use: for what a call books
        self.fallback = StructuralStrategy(
            max_chars=settings.structural_max_chars, max_names=settings.structural_max_names
        )
        self.remembering = bool(settings.context_memory_prefix) and not self.published
        # Built now (the handler builds the strategy at init), so a cold environment's first invocation does
        # not pay for them; without a region the client stays unbuilt, and every call falls back (no region).
        self._client = client
        if client is None and settings.context_defer != "always":  # always: no call is ever made here
            with contextlib.suppress(TransformationError):
                self._client = self._new_client()
        # Built now, not on a worker thread: boto3's session is not shared. Pending records go through its
        # S3 client (``pending``: both are written from one pool of MEMORY_THREADS).
        self._memory = memory if memory is not None or not self.remembering else ContextMemory()

    @property
    def client(self) -> ClaudeClient:
        if self._client is None:
            self._client = self._new_client()
        return self._client

    def _new_client(self) -> ClaudeClient:
        return ClaudeClient(
            region=resolve_region(self.settings.model_region),
            timeout_seconds=self.settings.model_timeout_seconds,
            max_retries=self.settings.model_max_retries,
            max_connections=self.concurrency,
            on_throttle=self.limit.on_throttle,
            shared_quota=self.quota,
        )

    def _shared_quota(self) -> SharedQuota | None:
        """The quota every invocation shares (``shared_quota``), when a table and the quota are set."""
        s = self.settings
        if not s.model_quota_table or self.published:
            return None
        requests_per_minute = s.model_requests_per_minute
        if warning := unlisted_rpm(s.model_id, requests_per_minute):  # once, at the cold start
            requests_per_minute = 0
            tokens = s.model_tokens_per_minute
            logger.warning(
                warning
                + ("; the shared quota counts MODEL_TOKENS_PER_MINUTE alone" if tokens else "")
                + ("" if tokens else "; without MODEL_TOKENS_PER_MINUTE the shared quota is off")
            )
            if not tokens:
                return None
        rate = QuotaRate(requests_per_minute, s.model_tokens_per_minute, s.model_quota_burst_seconds)
        # No invocation books a turn it could not be sent by: none further ahead than an attempt waits
        # (MODEL_TIMEOUT_SECONDS) plus the largest call (a document just under MAX_DOCUMENT_TOKENS, twice
        # for the prompt around it, and a full group's max_tokens at the burndown). An end beyond: a clock.
        burndown = output_burndown(s.model_id, s.model_output_burndown)
        largest = 2 * s.max_document_tokens + burndown * (s.context_max_tokens + 16) * s.group_size
        horizon = s.model_timeout_seconds + rate.burst_seconds + rate.cost(largest)
        return SharedQuota(
            s.model_quota_table, f"{s.model_id} {s.model_region}".strip(), rate, horizon=horizon
        )

    @property
    def memory(self) -> ContextMemory:
        if self._memory is None:
            self._memory = ContextMemory()
        return self._memory

    @property
    def pending(self) -> PendingStore:
        if self._pending is None:
            self._pending = PendingStore(self.memory.client)
        return self._pending

    @property
    def prompt_snapshot(self) -> PromptSnapshot:
        settings = self.settings
        return PromptSnapshot(
            model_id=settings.model_id,
            instruction=settings.context_instruction,
            glossary=settings.glossary,
            context_max_tokens=settings.context_max_tokens,
            context_max_chars=settings.context_max_chars,
            max_document_tokens=settings.max_document_tokens,
            window_tokens=settings.window_tokens,
            opening_tokens=settings.opening_tokens,
        )

    def contextualize(
        self, documents: Iterable[SourceDocument], invocation: Invocation | None = None
    ) -> Iterator[DocumentContexts]:
        return _Run(self, invocation or Invocation(bucket="")).execute(documents)

    def contexts_for(
        self, document: SourceDocument, deadline: Deadline | None = None
    ) -> list[ChunkContext | None]:
        invocation = Invocation(bucket="", deadline=deadline or Deadline.unlimited())
        (result,) = list(self.contextualize([document], invocation))  # drained: its contexts are saved
        return list(result.contexts)


@dataclass(eq=False)
class _Open:
    """A document being contextualized."""

    seq: int
    document: SourceDocument
    units: list[Unit]
    contexts: list[ChunkContext | None]
    memory_key: str = ""
    remembered: Remembered = field(default_factory=Remembered)
    learned: dict[str, str] = field(default_factory=dict)  # new model contexts, by place key
    code: str = ""  # grouped mode: the code of this document's chunk markers
    grouped_units: set[int] = field(default_factory=set)  # units asked in groups (grouped mode, or auto)
    fallback: dict[int, str] = field(default_factory=dict)  # chunk index -> reason
    scheduled: bool = False
    cacheable: list[bool] = field(default_factory=list)
    # cached units whose last call expected to read the prefix and read none (below Bedrock's real minimum,
    # or evicted): their next calls book the prefix, as Bedrock will reserve it
    unread: set[int] = field(default_factory=set)
    _texts: dict[int, str] = field(default_factory=dict)
    _normal: dict[int, str] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.document.document.text)


class _Run:
    def __init__(self, strategy: ClaudeStrategy, invocation: Invocation) -> None:
        self.s = strategy
        self.settings = strategy.settings
        self.bucket = invocation.bucket
        self.deadline = invocation.deadline
        self.acct: ModelAccounting = invocation.accounting
        self.acct.prices = strategy.prices
        self.acct.cache_ttl = self.settings.cache_ttl
        self.planner = Planner()
        self.breaker = Breaker(
            threshold=self.settings.breaker_threshold, cooldown=self.settings.breaker_cooldown_seconds
        )
        self.open: dict[int, _Open] = {}
        self.stopped = False  # the hard stop passed: no more calls this invocation
        self.memory_on = strategy.remembering and bool(self.bucket)
        # Contexts made later are found through the remembered contexts: no memory, nothing to defer.
        self.defer = self.settings.context_defer if self.memory_on else "never"
        self.ids = invocation.ids
        self.pending_saves: list[Future[bool]] = []
        self._memory_warned = False
        self.clock = self.deadline.clock
        self.recent: list[float] = []  # durations of recent calls, successful or not
        self._seq = 0
        # The shared quota lives as long as the environment: this invocation's share of its counters is the
        # difference from here to the end (a call abandoned at the hard stop may add to the next one's).
        self.quota_before = strategy.quota.counters() if strategy.quota is not None else None

    # --- the loop ---
    def execute(self, documents: Iterable[SourceDocument]) -> Iterator[DocumentContexts]:
        pool = ThreadPoolExecutor(max_workers=self.s.concurrency, thread_name_prefix="ckb-claude")
        io = ThreadPoolExecutor(max_workers=MEMORY_THREADS, thread_name_prefix="ckb-memory")
        calls: dict[Future[Reply], tuple[Job, float]] = {}
        lookups: dict[Future[Remembered], _Open] = {}
        saves: list[tuple[Future[None], int]] = []
        order: deque[_Open] = deque()
        source = iter(documents)
        exhausted = False
        try:
            while True:
                exhausted = exhausted or self._read(source, order, lookups, io)
                if not self.stopped and self.deadline.passed():
                    self._hard_stop(calls, lookups)
                if self.stopped and lookups and self.deadline.compute_remaining() <= 0:
                    self._abandon_lookups(lookups)  # a lookup still out this late is not worth its wait
                if not self.stopped:
                    self._start(pool, calls)
                    if not calls and not lookups and self.planner.has_pending():
                        self._stalled()
                while order and self._complete(order[0]):
                    yield self._finish(order.popleft(), io, saves)
                if exhausted and not order:
                    break
                if not exhausted and self._room(order):
                    continue  # read more documents before waiting on anything
                self._wait(calls, lookups, order)
            self._await_saves(saves)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            io.shutdown(wait=False, cancel_futures=True)
            if self.s.quota is not None and self.quota_before is not None:
                self.acct.record_quota(self.s.quota.counters() - self.quota_before)

    def _read(
        self,
        source: Iterator[SourceDocument],
        order: deque[_Open],
        lookups: dict[Future[Remembered], _Open],
        io: ThreadPoolExecutor,
    ) -> bool:
        """Open documents while there is room; True once the source is exhausted."""
        while self._room(order):
            document = next(source, None)
            if document is None:
                return True
            opened = self._open(self._seq, document)
            self._seq += 1
            order.append(opened)
            # After the hard stop too: a remembered context costs one read, and beats the fallback.
            if self.memory_on and self.deadline.compute_remaining() > 0 and _any_text(opened):
                lookups[io.submit(self.s.memory.load, self.bucket, opened.memory_key)] = opened
            else:
                self._schedule(opened, Remembered())
        return False

    def _wait(
        self,
        calls: dict[Future[Reply], tuple[Job, float]],
        lookups: dict[Future[Remembered], _Open],
        order: deque[_Open],
    ) -> None:
        """Until a call or a lookup ends (at most a slice of time), and handle what ended."""
        left = self.deadline.compute_remaining() if self.stopped else self.deadline.remaining()
        timeout = max(0.0, min(_WAIT_SLICE, left))
        waiting: list[Future[Any]] = [*calls, *lookups]
        if waiting:
            finished, _ = wait(waiting, timeout=timeout, return_when=FIRST_COMPLETED)
            for future in finished:
                if future in calls:
                    job, started = calls.pop(future)
                    self._on_call(future, job, started)
                else:
                    self._on_lookup(future, lookups.pop(future))
        elif not (order and self._complete(order[0])):
            # Waiting for the breaker's probe or a throttled call's turn.
            ready = self.planner.next_ready_in(self.clock())
            time.sleep(min(timeout, ready) if ready is not None else timeout or 0.01)

    def _room(self, order: deque[_Open]) -> bool:
        if not order:
            return True
        limit = 2 if self.s.published else max(4, 2 * self.s.concurrency)
        held = sum(o.size for o in order)
        return len(order) < limit and (
            held < MAX_OPEN_CHARS or (len(order) < MIN_OPEN and held < MIN_OPEN_CHARS)
        )

    # --- documents ---
    def _open(self, seq: int, document: SourceDocument) -> _Open:
        settings = self.settings
        if self.s.published:
            units, start = [], 0
            for size in document.batch_sizes or (document.chunk_count,):
                units.append(Unit((), tuple(range(start, start + size))))
                start += size
        else:
            units = plan_units(
                document.document,
                max_tokens=settings.max_document_tokens,
                window_tokens=settings.window_tokens,
                opening_tokens=settings.opening_tokens,
            )
            if len(units) > 1 or (units and units[0].windowed):
                self.acct.windowed_documents += 1
        opened = _Open(seq, document, units, [None] * document.chunk_count)
        if self.s.grouped or self.s.auto:
            opened.code = marker_code(document.document.text)
        if self.memory_on:
            opened.memory_key = document_key(
                self.settings.context_memory_prefix, self.s.fingerprint, document.document.text
            )
        self.open[seq] = opened
        return opened

    def _on_lookup(self, future: Future[Remembered], opened: _Open) -> None:
        try:
            remembered = future.result()
        except Exception as exc:
            self.acct.memory_errors += 1
            if not self._memory_warned:
                logger.warning(
                    "remembered contexts unavailable; calling the model", extra={"error": str(exc)}
                )
                self._memory_warned = True
            remembered = Remembered()
        self._schedule(opened, remembered)

    def _abandon_lookups(self, lookups: dict[Future[Remembered], _Open]) -> None:
        for future, opened in lookups.items():
            future.cancel()
            self._schedule(opened, Remembered())
        lookups.clear()

    def _schedule(self, opened: _Open, remembered: Remembered) -> None:
        opened.remembered = remembered
        needed: set[int] = set()
        texts = _text_counts(opened) if remembered.by_text else {}
        # Each chunk's unit, once: looked up per remembered chunk, a scan of the units made a re-sync of a
        # large document quadratic.
        unit_of = {index: number for number, spec in enumerate(opened.units) for index in spec.chunks}
        for index in _all(opened):
            if not _needs_context(opened, index):
                continue
            chunk = opened.document.chunk(index)
            start = opened.document.document.spans[index].start
            known = remembered.get(chunk, start, unique=texts.get(chunk) == 1) if remembered else None
            if known and self._remembered(opened, unit_of[index], index, known):
                self.acct.chunks_remembered += 1
            else:
                needed.add(index)
        if self.defer == "always":  # no model call here: the contexts are made later (ckb contextualize)
            for index in needed:
                opened.fallback[index] = DEFERRED
            self.planner.add(opened.seq, [])
            opened.scheduled = True
            return
        units: list[tuple[bool, list[Job]]] = []
        for number, unit in enumerate(opened.units):
            if self.stopped:  # remembered contexts only: the rest get the fallback below
                units.append((False, [Job(opened.seq, number, (i,)) for i in unit.chunks if i in needed]))
                opened.cacheable.append(False)
                continue
            chunks = [i for i in unit.chunks if i in needed]
            if self.s.auto and not (len(chunks) > 1 and self._long_enough(opened, number)):
                opened._texts.pop(number, None)  # measured as the plain unit: it is shown marked
                opened.grouped_units.add(number)
                self.acct.grouped_units += 1
            elif self.s.grouped:
                opened.grouped_units.add(number)
            if number in opened.grouped_units:
                size = self.settings.group_size
                groups = [tuple(chunks[i : i + size]) for i in range(0, len(chunks), size)]
                jobs = [Job(opened.seq, number, g, grouped=True) for g in groups]
            else:
                jobs = [Job(opened.seq, number, (i,)) for i in chunks]
            # A cache write costs more than plain input: only worth it when the prefix is read again.
            cacheable = not self.s.published and len(jobs) > 1 and self._long_enough(opened, number)
            opened.cacheable.append(cacheable)
            units.append((cacheable, jobs))
        self.planner.add(opened.seq, units)
        opened.scheduled = True
        if self.stopped:
            self._fallback_jobs(self.planner.take_pending(opened.seq), "deadline")

    def _long_enough(self, opened: _Open, unit: int) -> bool:
        tokens = estimate_tokens(self.s.prompt.system) + estimate_tokens(self._text(opened, unit))
        return tokens >= self.s.min_cache_tokens

    def _text(self, opened: _Open, unit: int) -> str:
        """What the model is shown as the document for this unit (markers at chunk starts when grouped)."""
        if unit not in opened._texts:
            spec = opened.units[unit]
            document = opened.document
            if self.s.published:  # the published algorithm: the batch's own chunks joined
                text = "\n".join(document.chunk(i) for i in spec.chunks)
            elif unit in opened.grouped_units:
                spans = document.document.spans
                text = marked_unit(spec, document.document.text, lambda i: spans[i].start, opened.code)
            else:
                text = spec.render(document.document.text)
            opened._texts[unit] = text
        return opened._texts[unit]

    def _complete(self, opened: _Open) -> bool:
        return opened.scheduled and not self.planner.busy(opened.seq)

    def _finish(
        self, opened: _Open, io: ThreadPoolExecutor, saves: list[tuple[Future[None], int]]
    ) -> DocumentContexts:
        for index in _all(opened):  # a guard: every chunk leaves with a decision
            if (
                _needs_context(opened, index)
                and opened.contexts[index] is None
                and index not in opened.fallback
            ):
                opened.fallback[index] = "no_answer"
        if opened.fallback:
            structural = self.s.fallback.contexts_for(opened.document, self.deadline)
            for index in opened.fallback:
                opened.contexts[index] = structural[index]
            reasons = Counter(opened.fallback.values())
            deferred = reasons.pop(DEFERRED, 0)
            self.acct.deferred += deferred
            self.acct.fallbacks.update(reasons)
            if reasons:
                logger.warning(
                    "chunks given the structural context instead of a model context",
                    extra={
                        "file": opened.document.source,
                        "batch_keys": list(opened.document.keys),
                        "chunks": sum(reasons.values()),
                        "reasons": dict(reasons),
                        "chunk_indices": sorted(i for i, r in opened.fallback.items() if r != DEFERRED)[
                            :_LOGGED_INDICES
                        ],
                        "pending": self.defer != "never",
                    },
                )
            if self.defer != "never":
                self.pending_saves.append(io.submit(self._record_pending, opened))
        if opened.learned and opened.memory_key:
            merged = {**_by_place(opened), **opened.learned}
            saves.append(
                (
                    io.submit(
                        self.s.memory.save, self.bucket, opened.memory_key, merged, read=opened.remembered
                    ),
                    len(opened.learned),
                )
            )
        self.planner.remove(opened.seq)
        del self.open[opened.seq]
        return DocumentContexts(opened.document, tuple(opened.contexts))

    def _record_pending(self, opened: _Open) -> bool:
        """Record the document for ``ckb contextualize`` (idempotent: keyed by its text and prompt); True when
        the record is new."""
        document = opened.document
        text = document.document.text
        pending = record(
            memory_key=opened.memory_key,
            fingerprint=self.s.fingerprint,
            text=text,
            spans=[(span.start, span.end) for span in document.document.spans],
            pending=opened.fallback,
            prompt=self.s.prompt_snapshot,
            source=document.source,
            path=document.path,
            ids=self.ids,
        )
        key = pending_key(
            self.settings.pending_prefix,
            opened.memory_key,
            self.settings.context_memory_prefix,
            document.source,
        )
        return self.s.pending.save(self.bucket, key, pending)

    def _await_saves(self, saves: list[tuple[Future[None], int]]) -> None:
        """Wait for the pending records and remembered contexts to be written, while the deadline allows
        (writes, like the outputs: they take compute time, not the model's). One not written in time, or
        refused, is counted and logged; its chunks keep their contexts in this output all the same."""
        pending = [(future, 1) for future in self.pending_saves]
        self.pending_saves.clear()
        written, failed = self._await_writes(pending, "could not record a pending document")
        # A record another call of the same document wrote first is refreshed, not counted again.
        new = sum(
            1 for f, _ in pending if f.done() and not f.cancelled() and not f.exception() and f.result()
        )
        self.acct.documents_pending += new
        self.acct.documents_pending_refreshed += written - new
        self.acct.pending_errors += failed
        written, failed = self._await_writes(saves, "could not remember contexts")
        self.acct.contexts_remembered_written += written
        self.acct.memory_errors += failed

    def _await_writes(self, writes: list[tuple[Future[None], int]], warning: str) -> tuple[int, int]:
        """(what the writes done carried, how many failed or were not done in time, each logged)."""
        if not writes:
            return 0, 0
        remaining = self.deadline.compute_remaining()
        wait([f for f, _ in writes], timeout=None if remaining == float("inf") else max(0.0, remaining))
        written = failed = 0
        for future, count in writes:
            try:
                if not future.done():
                    raise TimeoutError("no time left to write it")
                future.result()
            except Exception as exc:
                failed += 1
                logger.warning(warning, extra={"error": str(exc)})
                continue
            written += count
        return written, failed

    # --- calls ---
    def _start(self, pool: ThreadPoolExecutor, calls: dict[Future[Reply], tuple[Job, float]]) -> None:
        while len(calls) < self.s.limit.allowed:
            if not self.deadline.can_start(self._expected_seconds()):
                return
            if not self.breaker.allows():
                return
            now = self.clock()
            job = self.planner.next_job(now)
            if job is None:
                self.breaker.on_abandoned()
                return
            job.probe = self.breaker.probing
            try:
                client = self.s.client
            except TransformationError as exc:  # no region: the model cannot be called at all
                self.planner.dropped(job)
                self.breaker.on_failure(str(exc), fatal=True)
                self._fallback_jobs([job], "model_unavailable", str(exc))
                return
            request = self._request(job)
            job.max_tokens = int(request.get("max_tokens", 0))
            if self.s.quota is None:
                calls[pool.submit(client.invoke, request)] = (job, now)
                continue
            # Bedrock reserves the prompt and max_tokens, not a cache read: the unit's first call writes its
            # cached prefix (reserved), the others read it (not); the reply settles to what was kept
            reserved = reserved_tokens(request, reads_cache=self._reads_cache(job))
            # booked: that, or what it is expected to settle if more (a 5x burndown keeps more than it
            # reserved): the timeline is not behind what Bedrock counts while the call runs
            tokens = booked_tokens(
                request,
                reserved,
                output_burndown=self.s.output_burndown,
                output_share=self.s.output_share.value,
            )
            future = pool.submit(
                client.invoke,
                request,
                quota_tokens=tokens,
                max_wait=self.settings.model_timeout_seconds,  # an attempt waits at most as long as it takes
                wait_until=self._wait_until(),
            )
            calls[future] = (job, now)

    def _reads_cache(self, job: Job) -> bool:
        """The call is expected to read its unit's cached prefix: the unit is cached and this is not the
        call that writes it (``scheduling``: it runs alone, before the others), and its last read call did
        read it. A cache that expired or was written again is what the reply's usage says, settled as
        such."""
        opened = self.open[job.doc]
        return opened.cacheable[job.unit] and not job.first and job.unit not in opened.unread

    def _wait_until(self) -> float:
        """Until when (epoch seconds) a call may wait for its turns of the shared quota: while it could
        still end before the model's time is up (its own time, the p95 of recent replies, taken off)."""
        model = percentile(self.acct.latencies[-_RECENT_CALLS:], 0.95)
        return time.time() + max(0.0, self.deadline.remaining() - model)

    def _expected_seconds(self) -> float:
        """How long a call is expected to take: the p95 of the recent ones, failed ones included (0 before
        any, so the first may start)."""
        return percentile(self.recent[-_RECENT_CALLS:], 0.95)

    def _request(self, job: Job) -> dict[str, Any]:
        opened = self.open[job.doc]
        text = self._text(opened, job.unit)
        cache = opened.cacheable[job.unit]
        if job.grouped:
            return grouped_request(
                self.s.prompt,
                marked_document=text,
                numbers=[i + 1 for i in job.chunks],
                cache=cache,
                code=opened.code,
            )
        chunk = _clip(opened.document.chunk(job.chunks[0]), self.settings.window_tokens * 3)
        return chunk_request(self.s.prompt, document=text, chunk=chunk, cache=cache)

    def _note_duration(self, future: Future[Reply], started: float) -> None:
        """A call's time, for the next ones' expected time: without the turns of the shared quota it waited
        for (a call started later waits its own, bounded by ``_wait_until``)."""
        elapsed = self.clock() - started
        with contextlib.suppress(Exception):  # a failed call: its whole time
            elapsed -= future.result().quota_wait
        self.recent.append(elapsed)
        del self.recent[: -_RECENT_CALLS * 2 or None]  # keep the list short; only the recent ones count

    def _on_call(self, future: Future[Reply], job: Job, started: float) -> None:
        acct = self.acct
        acct.calls += 1
        self._note_duration(future, started)
        try:
            reply = future.result()
        except ModelCallError as exc:
            acct.attempts += exc.attempts
            acct.throttles += exc.throttles
            acct.failed_calls[exc.kind] += 1
            self._failed(job, exc.kind, str(exc))
            return
        except Exception as exc:
            acct.attempts += 1
            acct.failed_calls["unexpected"] += 1
            logger.exception("unexpected error from the model client")
            self._failed(job, "transient", f"{type(exc).__name__}")
            return
        acct.attempts += reply.attempts
        acct.throttles += reply.throttles
        acct.add_usage(reply.usage)
        self._settle(job, reply)
        acct.latencies.append(reply.seconds)
        self.s.limit.on_success()
        self.breaker.on_success()
        opened = self.open[job.doc]
        if job.grouped:
            answers = parse_grouped(reply.text, [i + 1 for i in job.chunks])
            missing: list[Job] = []
            for index in job.chunks:
                answer = answers.get(index + 1)
                if answer is not None and self._accept(opened, job.unit, index, answer):
                    continue
                if answer is None:
                    acct.answers_rejected["missing"] += 1
                if len(job.chunks) > 1 and index not in opened.fallback:  # alone, on the same cached prefix
                    missing.append(Job(job.doc, job.unit, (index,), grouped=True))
                    acct.grouped_retries += 1
                else:
                    opened.fallback.setdefault(index, "answer_rejected")
            self.planner.finished(job, extra=missing)
        else:
            index = job.chunks[0]
            # Stopped at max_tokens: cut mid-sentence, kept as a capped context, never as a whole one.
            truncated = reply.stop_reason == "max_tokens"
            if not self._accept(opened, job.unit, index, reply.text, truncated=truncated):
                opened.fallback.setdefault(index, "answer_rejected")
            self.planner.finished(job)
        self._release(opened, job.unit)

    def _settle(self, job: Job, reply: Reply) -> None:
        """With a shared quota: the reply settles its booking to what Bedrock kept (the unused max_tokens
        given back, output at the burndown charged), and says what the next calls book (the output replies
        use, whether the unit's cache was read)."""
        if self.s.quota is None:
            return
        usage = reply.usage
        if reply.quota_booking is not None:
            kept = kept_tokens(
                input_tokens=usage.input_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                output_tokens=usage.output_tokens,
                output_burndown=self.s.output_burndown,
            )
            self.s.quota.settle(reply.quota_booking, kept)
        self.s.output_share.add(usage.output_tokens, job.max_tokens)
        self._note_cache_read(job, reply)

    def _note_cache_read(self, job: Job, reply: Reply) -> None:
        """A call of a cached unit after its first that read nothing from the cache: the unit's next calls
        book the prefix (Bedrock reserves what it does not read), until one reads it again."""
        opened = self.open[job.doc]
        if not opened.cacheable[job.unit] or job.first:
            return
        if reply.usage.cache_read_tokens:
            opened.unread.discard(job.unit)
        else:
            opened.unread.add(job.unit)

    def _release(self, opened: _Open, unit: int) -> None:
        """A unit with nothing left to ask no longer needs its prompt text (a long document has many)."""
        if self.planner.unit_idle(opened.seq, unit):
            opened._texts.pop(unit, None)
            opened._normal.pop(unit, None)

    def _accept(self, opened: _Open, unit: int, index: int, answer: str, *, truncated: bool = False) -> bool:
        verdict = self._check(opened, unit, index, answer, truncated=truncated)
        if verdict is None:
            return False
        opened.contexts[index] = ChunkContext(verdict, NAME)
        opened.learned[_place(opened, index)] = verdict
        self.acct.chunks_from_model += 1
        return True

    def _remembered(self, opened: _Open, unit: int, index: int, text: str) -> bool:
        """A remembered context, checked as strictly as an answer (the store is outside this process)."""
        verdict = self._check(opened, unit, index, text, remembered=True)
        if verdict is None:
            return False
        opened.contexts[index] = ChunkContext(verdict, NAME)
        return True

    def _check(
        self,
        opened: _Open,
        unit: int,
        index: int,
        text: str,
        *,
        truncated: bool = False,
        remembered: bool = False,
    ) -> str | None:
        """The context to keep, or None (counted). Any failure on one chunk's text is that chunk's fallback
        ("context_error"), never the call's."""
        kind = "remembered_" if remembered else ""
        try:
            if unit not in opened._normal:
                opened._normal[unit] = normalize(self._text(opened, unit))
            verdict = check_answer(
                text,
                chunk=opened.document.chunk(index),
                normalized_document=opened._normal[unit],
                max_chars=self.settings.context_max_chars,
                truncated=truncated,
            )
        except Exception:
            logger.exception("a context could not be checked", extra={"file": opened.document.source})
            self.acct.answers_rejected[f"{kind}error"] += 1
            opened.fallback[index] = "context_error"
            return None
        if verdict.text is None:
            self.acct.answers_rejected[kind + verdict.reason] += 1
            return None
        if verdict.reason == "capped":
            self.acct.answers_capped += 1
        return verdict.text

    def _failed(self, job: Job, kind: str, message: str) -> None:
        opened = self.open[job.doc]
        log = {"file": opened.document.source, "chunk_indices": list(job.chunks)[:_LOGGED_INDICES]}
        if kind in ("throttled", "rejected") and job.probe:
            self.breaker.on_abandoned()  # the model answered: the probe slot is free again
        if kind == "throttled":  # the quota, not the model: wait our turn, a while
            self.s.limit.on_throttle()
            if job.throttles + 1 < MAX_THROTTLED_CALLS:
                self.acct.requeued_calls += 1
                ceiling = min(_MAX_THROTTLE_PAUSE, _THROTTLE_PAUSE * 2**job.throttles)
                self.planner.later(job, self.clock() + random.uniform(_THROTTLE_PAUSE / 2, ceiling))
                return
            reason = "model_throttled"
        elif kind == "transient":
            alone = not self.planner.others_busy(job.doc)
            self.breaker.on_failure(message, probe=job.probe, source=job.doc, alone=alone)
            document_failing = self.planner.failing(job.doc) + 1 >= DOCUMENT_FAILURE_LIMIT
            if job.failures + 1 < MAX_JOB_ATTEMPTS and not document_failing:
                self.acct.requeued_calls += 1
                self.planner.again(job)
                logger.info("model call failed; will try again", extra={**log, "error": message})
                self._release(opened, job.unit)
                return
            reason = "model_error"
        elif kind == "fatal":
            self.breaker.on_failure(message, fatal=True, probe=job.probe)
            reason = "model_unavailable"
        else:
            reason = "model_rejected"
        logger.warning("model call failed for good", extra={**log, "error": message, "reason": reason})
        self.planner.failed(job)
        self._release(opened, job.unit)
        self._fallback_jobs([job], reason, message)
        if reason == "model_error" and self.planner.failing(job.doc) >= DOCUMENT_FAILURE_LIMIT:
            # Its own calls keep failing while the model answers others: contained to it, the rest go on.
            given_up = self.planner.take_pending(job.doc)
            logger.warning(
                "the model keeps failing on this document: its chunks get the structural context",
                extra={**log, "failed_calls": self.planner.failing(job.doc)},
            )
            self._fallback_jobs(given_up, "model_error", message)

    def _fallback_jobs(self, jobs: list[Job], reason: str, message: str = "") -> None:
        for job in jobs:
            opened = self.open[job.doc]
            for index in job.chunks:
                opened.fallback[index] = reason
        if jobs and reason in MODEL_FAILURES and self.settings.on_model_error == "fail":
            files = sorted({self.open[j.doc].document.source for j in jobs})
            raise ModelError(
                f"model {self.settings.model_id} failed ({message or reason}) for {', '.join(files[:5])}; "
                "ON_MODEL_ERROR=fail, so the file(s) fail instead of getting the structural context"
            )

    def _stalled(self) -> None:
        """Nothing is running and nothing can start: the model is given up on, the deadline is near, the
        breaker is open, or every queued call waits after a throttle."""
        expected = self._expected_seconds()
        probe_in = self.breaker.next_probe_in()
        if self.breaker.gave_up or (
            probe_in is not None and not self.deadline.can_start(probe_in + expected)
        ):
            self._fallback_jobs(self.planner.take_pending(), "model_unavailable", self.breaker.reason)
        elif not self.deadline.can_start(expected):
            self._fallback_jobs(self.planner.take_pending(), "deadline")
        # otherwise wait: for the breaker's probe, or for a throttled call's turn

    def _hard_stop(
        self,
        calls: dict[Future[Reply], tuple[Job, float]],
        lookups: dict[Future[Remembered], _Open],
    ) -> None:
        """The model's time is up: use what has already come back, abandon the calls still running, and give
        every chunk still waiting for a call the fallback."""
        self.stopped = True
        for future in [f for f in calls if f.done()]:
            job, started = calls.pop(future)
            self._on_call(future, job, started)
        for future in [f for f in lookups if f.done()]:
            self._on_lookup(future, lookups.pop(future))
        for future, (job, _) in calls.items():
            future.cancel()
            self.planner.dropped(job)
            self.acct.calls += 1
            self.acct.attempts += 1
            self.acct.failed_calls["abandoned_at_deadline"] += 1
            self._fallback_jobs([job], "deadline")
        calls.clear()
        self.breaker.on_abandoned()
        # Lookups still running go on: a remembered context beats the fallback, and costs no model time.
        self._fallback_jobs(self.planner.take_pending(), "deadline")


def _place(opened: _Open, index: int) -> str:
    return place_key(opened.document.chunk(index), opened.document.document.spans[index].start)


def _text_counts(opened: _Open) -> Counter[str]:
    """How often each chunk text occurs in the document: a format-1 remembered entry (keyed by text) is
    only trusted for a text that occurs once."""
    return Counter(opened.document.chunk(i) for i in _all(opened))


def _by_place(opened: _Open) -> dict[str, str]:
    """What was remembered, by place (format-1 entries migrated: ``Remembered.migrated``)."""
    if not opened.remembered.by_text:
        return dict(opened.remembered.by_place)
    spans = opened.document.document.spans
    return opened.remembered.migrated([(opened.document.chunk(i), spans[i].start) for i in _all(opened)])


def _any_text(opened: _Open) -> bool:
    return any(_needs_context(opened, i) for i in _all(opened))


def _all(opened: _Open) -> range:
    return range(opened.document.chunk_count)


def _needs_context(opened: _Open, index: int) -> bool:
    return bool(opened.document.chunk(index).strip())


def _clip(text: str, limit: int) -> str:
    """A chunk too long to send whole: its head and tail (the context situates it; it need not be whole)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[… {len(text) - 2 * half:,} characters omitted …]\n{text[-half:]}"
