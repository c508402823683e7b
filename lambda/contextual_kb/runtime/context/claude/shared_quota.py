"""One model quota shared by every invocation: turns in the quota's own units, kept in one DynamoDB item.

Why: each invocation adapts its own concurrency to 429s, which is fair in calls at once, not in the quota's
units. A quota counted in tokens lets a large call (a document's cache write) in only once its bucket holds
that many tokens, and small calls from other invocations keep draining it: an invocation with large
documents ends last, several times later than one with small ones (docs/BENCHMARKS.md, "Many invocations,
one model quota"). Here every call of every invocation first takes a turn on shared timelines, as the
generic cell rate algorithm (GCRA) does, one a quota: each timeline's end (``tat`` for the token quota,
``rat`` for the request quota, the theoretical arrival time) moves on by what the call costs that quota, in
seconds (its tokens over tokens a second; one request over requests a second), and the call is sent once
both quotas have refilled for it. Turns are taken in order, whatever their size: a large call waits its
turn, and no small call can take it. (One timeline of the binding quota's cost a call added up a call
binding the tokens and one binding the requests, which the two quotas take side by side.)

Off unless ``MODEL_QUOTA_TABLE`` and the quota (``MODEL_REQUESTS_PER_MINUTE``, ``MODEL_TOKENS_PER_MINUTE``)
are set. The quota to give is what this Knowledge Base's ingestion may use of the account's (per model and
Region, in Service Quotas), a little under it: the tokens of a call are estimated before it is sent, and a
call that is throttled anyway is handled as before (the SDK's paced retries, the adaptive limit).

What a call costs is what Bedrock counts (docs/HOW-IT-WORKS.md, "How Bedrock counts a request";
../shared/notes/bedrock-quotas.md): at its start Bedrock **reserves** ``input + cache write + max_tokens``
(a 429 when the quota does not hold that; a cache read is not reserved), and at its end it **settles** to
``input + cache write + output x burndown`` (a cache read never counts). So a call books the reservation,
its cached prefix only when it writes it (``reserved_tokens``: the engine knows which call of a unit
writes the cache and which read it), and once its reply's usage says what was settled, the difference
goes back: given back (the unused ``max_tokens``), it brings this invocation's later turns forward at once
and goes back to the table's timeline with its next booking (no round trip of its own); charged (output at
a burndown over what ``max_tokens`` reserved), it moves the timeline on with that booking. An attempt
answered 429 gives its whole turn back. The timeline's minute is any 60 seconds (``QuotaRate``).

Each invocation books at most ``lead`` seconds of the quota ahead (a call booked and then abandoned at a
deadline wastes at most that); one thread of an invocation books at a time, for every call of it then
waiting, so the table sees at most one writer per invocation, a read and a write per booking (a write
another invocation got in first returns what it wrote, and the turns are written again without a second
read). A booking slower than ``BOOKING_SECONDS`` counts as a table failure: a slow table would otherwise
hold the invocation's calls back without a trace. A timeline end further ahead than any fleet could book
(``horizon``: the longest a call waits for a turn plus the largest call) is a clock's error, and is reset.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from contextual_kb.runtime.context.claude.pricing import rpm_listed_none
from contextual_kb.runtime.observability import logger

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

LEAD_SECONDS = 2.0
TABLE_RETRY_SECONDS = 30.0  # after a table error, calls go without turns this long
# A booking (a read and a write, or more after raced writes) slower than this is a table failure: DynamoDB
# answers in milliseconds, and a slow booking holds up the calls of the invocation waiting for it. The lead:
# a booking books up to that much of the quota, so one faster than it keeps the invocation's calls flowing
# (1 s failed 15 of 16 invocations' tables in a fleet on a loaded machine: 2,683 429s, bench/fleet.py).
BOOKING_SECONDS = LEAD_SECONDS
# What a reply gives back goes to the timeline with this invocation's next booking; one older than the
# quota's own minute is dropped (the quota it stood for has long refilled, or gone unused).
GIVE_BACK_SECONDS = 60.0
# Without a horizon given: the longest an attempt may take (MODEL_TIMEOUT_SECONDS at most, 900 s).
HORIZON_SECONDS = 900.0
# Claude's tokenizer gives about 3.5 bytes a token on code and English (windows.py counts 3, to be sure a
# document is cached); the quota given, a little under the account's, absorbs the rest.
QUOTA_BYTES_PER_TOKEN = 3.5


@dataclass(frozen=True, slots=True)
class QuotaRate:
    """The quota shared, per minute, and how much of it (seconds of it) may pass at once.

    The window Bedrock counts a minute in is not documented (clock minutes, a sliding minute, a bucket): the
    turns hold for the strictest of the documented shapes, any 60 seconds, which every clock minute is. A
    timeline let ``burst_seconds`` ahead of the clock sends at most ``span + burst_seconds`` of its seconds in
    any ``span`` seconds, so a minute of the quota is ``60 + burst_seconds`` seconds of the timeline: any 60
    seconds hold at most the quota (``60 / (60 + burst)`` of it sustained), and nothing assumes a
    per-second refill."""

    requests_per_minute: int
    tokens_per_minute: int
    burst_seconds: float = 0.5  # the function's default is MODEL_QUOTA_BURST_SECONDS's (settings.py)

    @property
    def minute(self) -> float:
        """Seconds of the timeline one minute of the quota takes: the minute and the burst sent within it."""
        return 60.0 + self.burst_seconds

    def cost(self, tokens: int) -> float:
        """Seconds of the quota one call of ``tokens`` counted tokens takes: the binding quota's. Pure."""
        return max(self.request_cost(), self.token_cost(tokens))

    def request_cost(self) -> float:
        """Seconds of the request quota one call takes (0 without one). Pure."""
        return self.minute / self.requests_per_minute if self.requests_per_minute else 0.0

    def token_cost(self, tokens: int) -> float:
        """Seconds of the token quota ``tokens`` take (0 without one). Pure."""
        return self.minute * tokens / self.tokens_per_minute if self.tokens_per_minute else 0.0


@dataclass(frozen=True, slots=True)
class Turn:
    tat: float  # the timeline's new end
    send_at: float  # when the call may be sent (epoch seconds)


def take_turn(tat: float, now: float, cost: float, burst: float) -> Turn:
    """The turn of a call costing ``cost`` seconds of quota on a timeline ending at ``tat``. A token bucket
    of ``burst`` seconds refilling as the timeline goes holds the call from ``burst - cost`` seconds before
    the timeline's end; a call larger than the bucket needs it full: from the end. Pure."""
    return Turn(tat=max(tat, now) + cost, send_at=max(now, tat - max(0.0, burst - cost)))


def unlisted_rpm(model_id: str, requests_per_minute: int, setting: str = "MODEL_REQUESTS_PER_MINUTE") -> str:
    """A warning line when ``requests_per_minute`` is given for a model AWS lists no RPM quota for
    (``pricing.rpm_listed_none``, the stand-in's rule too: Bedrock stopped enforcing RPM for some models in
    May 2026); "" otherwise. The RPM is then ignored, not refused: counting a quota AWS does not enforce only
    slows the calls, and AWS's RPM rows changed more than once in 2026, so neither a deploy nor an ingestion
    should fail over one. A model the rule does not name keeps the RPM given. Pure."""
    if not requests_per_minute or not rpm_listed_none(model_id):
        return ""
    return (
        f"{setting}={requests_per_minute} ignored: AWS lists no requests-per-minute quota for {model_id} "
        "(Bedrock enforces none for some models since 2026-05-27): remove it"
    )


def estimated_tokens(text: str) -> int:
    """Tokens of ``text`` as the quota's estimate counts them. Pure."""
    return math.ceil(len(text.encode("utf-8")) / QUOTA_BYTES_PER_TOKEN)


def reserved_tokens(
    request: Mapping[str, Any], *, reads_cache: bool = False, reserve_cache_reads: bool = False
) -> int:
    """What Bedrock reserves at the start of a call of ``request`` (``messages.create`` keyword arguments),
    estimated: its input and ``max_tokens``, never multiplied by the output burndown (that multiplies what
    is settled, not what is reserved). The prompt's cached prefix (everything up to the last block marked
    ``cache_control``) is reserved when it is written (``reads_cache`` False: the unit's first call, or a
    prompt not cached) and not when the call is expected to read it, as AWS's pages say (a cache read is
    neither reserved nor kept); ``reserve_cache_reads``: reserved all the same, as an older AWS text says
    (the stand-in's switch of the same name). Pure."""
    prefix, rest = _prompt_bytes(request)
    counted = rest if reads_cache and not reserve_cache_reads else prefix + rest
    return math.ceil(counted / QUOTA_BYTES_PER_TOKEN) + int(request.get("max_tokens", 0))


def _prompt_bytes(request: Mapping[str, Any]) -> tuple[int, int]:
    """(bytes of the cached prefix, bytes of the rest) of the request's prompt: the system blocks, then the
    messages' blocks, in the order Bedrock caches them; no block marked ``cache_control``: no prefix."""
    blocks: list[tuple[int, bool]] = [
        (len(block.get("text", "").encode("utf-8")), "cache_control" in block)
        for block in request.get("system", [])
    ]
    for message in request.get("messages", []):
        for block in message.get("content", []):
            if isinstance(block, dict):
                blocks.append((len(block.get("text", "").encode("utf-8")), "cache_control" in block))
            else:
                blocks.append((len(str(block).encode("utf-8")), False))
    end = max((i + 1 for i, (_, marked) in enumerate(blocks) if marked), default=0)
    return sum(size for size, _ in blocks[:end]), sum(size for size, _ in blocks[end:])


def booked_tokens(
    request: Mapping[str, Any], reserved: int, *, output_burndown: int, output_share: float
) -> int:
    """What a call books on the timeline: the larger of what Bedrock reserves (``reserved``) and what it is
    expected to settle, its output estimated as ``output_share`` of ``max_tokens`` (what the replies so far
    used of theirs) at the burndown. Why: at a 5x burndown a call settles more than it reserves (a context
    of 74 tokens keeps 370, where 160 were reserved), and a timeline booking the reservation alone runs
    ahead of what any 60 s hold until the replies' charges reach it: measured, 29 refusals in a 4-invocation
    fleet under a sliding minute (bench/fleet.py). The reply settles it either way. Pure."""
    max_tokens = int(request.get("max_tokens", 0))
    output = math.ceil(min(1.0, max(0.0, output_share)) * max_tokens)
    return max(reserved, reserved - max_tokens + max(1, output_burndown) * output)


class OutputShare:
    """The share of ``max_tokens`` replies use, for ``booked_tokens``: a moving average of the replies'
    (the last 20 or so weigh most), from ``start``. One per environment; updated by the engine's loop."""

    def __init__(self, start: float = 0.5, weight: float = 0.1) -> None:
        self.value = start
        self.weight = weight

    def add(self, output_tokens: int, max_tokens: int) -> None:
        if max_tokens > 0:
            share = min(1.0, output_tokens / max_tokens)
            self.value += self.weight * (share - self.value)


def kept_tokens(
    *, input_tokens: int, cache_write_tokens: int, output_tokens: int, output_burndown: int = 1
) -> int:
    """What Bedrock keeps of a call once answered, from its reply's usage: input, cache write and output at
    the burndown (the cache read and the unused ``max_tokens`` given back). Pure."""
    return input_tokens + cache_write_tokens + max(1, output_burndown) * output_tokens


@dataclass(eq=False, slots=True)
class _Ticket:
    """A call waiting for its turn; ``outcome``: "" until booked, then "turn", "none" (no turn in time) or
    "without" (the table failed: sent without a turn)."""

    cost: float  # seconds of the binding quota (what the lead counts)
    token_cost: float  # seconds of each quota: one timeline each
    request_cost: float
    give_up_at: float
    taken: bool = False  # in a booking under way
    send_at: tuple[float, float] = (0.0, 0.0)  # when each quota lets it be sent: tokens, requests
    outcome: str = ""
    seq: int = 0  # the booking's number, once booked
    forward: float = 0.0  # seconds its token turn was brought forward by earlier calls' give-backs

    def due(self) -> float:
        """When it may be sent: its turn on each timeline, the token one brought forward."""
        return max(self.send_at[0] - self.forward, self.send_at[1])


@dataclass(frozen=True, slots=True)
class Booking:
    waited: float  # seconds waited for the turn (or lost to the table)
    tokens: int  # tokens booked on the timeline; 0 when the attempt went without a turn
    seq: int = 0  # the booking's number in this invocation


@dataclass(frozen=True, slots=True)
class QuotaCounters:
    """What the shared quota did for an environment so far (``SharedQuota.counters``); the difference of two
    is an invocation's."""

    waited: float = 0.0  # seconds calls waited for their turns, those given none in time included
    conflicts: int = 0  # writes another invocation got in first (the turn was booked again)
    table_errors: int = 0  # bookings the table could not take (unreachable, denied, slow)
    without_turns: int = 0  # attempts sent without a turn because the table could not be used
    booked: float = 0.0  # seconds of the quota booked (what Bedrock reserves)
    given_back: float = 0.0  # seconds of it given back by replies (cache reads, unused max_tokens)
    resets: int = 0  # timeline ends found beyond the horizon (a clock ahead) and reset

    def __sub__(self, other: QuotaCounters) -> QuotaCounters:
        return QuotaCounters(
            waited=self.waited - other.waited,
            conflicts=self.conflicts - other.conflicts,
            table_errors=self.table_errors - other.table_errors,
            without_turns=self.without_turns - other.without_turns,
            booked=self.booked - other.booked,
            given_back=self.given_back - other.given_back,
            resets=self.resets - other.resets,
        )


class NoTurnError(Exception):
    """No turn before the caller's limit: the quota is taken for longer (handled as a throttle)."""


class SharedQuota:
    """Turns on the timelines of one item (``key``: the model and Region) of a DynamoDB table: read them,
    write the new ends only if nobody moved them since (a conditional write), else book again from the ends
    the failed write returns.

    Each invocation books turns only while the quota it has booked and not yet sent is under ``lead``
    seconds: with N invocations booking, each holds about 1/N of the timeline ahead, so each gets 1/N of
    the quota in its own units (a large call counts for its size), and an invocation alone keeps ``lead``
    seconds booked, enough to keep the quota busy. No invocation polls: one whose lead is full waits for
    its own calls to be sent."""

    def __init__(
        self,
        table: str,
        key: str,
        rate: QuotaRate,
        *,
        client: DynamoDBClient | None = None,
        lead: float = LEAD_SECONDS,
        horizon: float = HORIZON_SECONDS,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.table = table
        self.key = key
        self.rate = rate
        self.lead = lead
        self.horizon = horizon
        self._client = client
        self._clock = clock
        # None: a turn is waited for on the condition, so that a reply giving quota back wakes it (tests
        # inject a fake clock's sleep, which nothing wakes)
        self._sleep = sleep
        self._booking = threading.Lock()  # one thread of this invocation books at a time
        self._room = threading.Condition()  # guards the bookings not yet sent (the lead)
        self._booked: dict[int, float] = {}  # this invocation's turns not yet sent: cost by booking
        self._pending: dict[int, _Ticket] = {}  # the same turns, by booking (brought forward by give-backs)
        self._bookings = 0  # bookings numbered in the timeline's order
        self._queue: list[_Ticket] = []  # calls waiting for a booking, in order
        self.waited = 0.0  # seconds calls waited for their turns, in all
        self.conflicts = 0  # writes another invocation got in first
        self.table_errors = 0  # turns the table could not give (unreachable, denied): calls went anyway
        self.without_turns = 0  # attempts sent without a turn (the table failed, or failed lately)
        self.booked = 0.0  # seconds of the quota booked
        self.given_back = 0.0  # seconds given back by replies
        self.resets = 0  # timeline ends beyond the horizon, reset
        # Given back by replies and not yet on the timeline: (when, seconds), folded into the next booking.
        self._give_backs: list[tuple[float, float]] = []
        self._skip_until = 0.0

    def counters(self) -> QuotaCounters:
        with self._room:
            return QuotaCounters(
                self.waited,
                self.conflicts,
                self.table_errors,
                self.without_turns,
                self.booked,
                self.given_back,
                self.resets,
            )

    def wait_turn(self, tokens: int, give_up_at: float) -> float:
        """``book``, the seconds waited."""
        return self.book(tokens, give_up_at).waited

    def book(self, tokens: int, give_up_at: float) -> Booking:
        """Block until a call of ``tokens`` reserved tokens (``reserved_tokens``) may be sent. Raises
        NoTurnError if it could not be sent before ``give_up_at`` (epoch seconds), and then books nothing.
        The booking says what was booked, for ``settle`` once the reply says what was kept."""
        started = self._clock()
        if started < self._skip_until:  # the table failed lately: calls go without turns for a while
            return Booking(self._without_turn(started), 0)
        ticket = _Ticket(
            self.rate.cost(tokens), self.rate.token_cost(tokens), self.rate.request_cost(), give_up_at
        )
        try:
            waited, seq = self._wait_turn(ticket, started)
        except NoTurnError:
            with self._room:
                self.waited += self._clock() - started
            raise
        return Booking(waited, tokens if seq else 0, seq)

    def settle(self, booking: Booking, kept: int) -> None:
        """The reply to a call that booked ``booking`` says Bedrock kept ``kept`` tokens: what it gave back
        brings this invocation's later turns forward at once (the quota holds it again from the reply on)
        and goes back to the table's timeline with the invocation's next booking, for the others (a negative
        difference, an estimate under what the model counted, moves the timeline on). Nothing for a call
        that went without a turn. No I/O."""
        if booking.tokens <= 0:
            return
        seconds = self.rate.token_cost(booking.tokens) - self.rate.token_cost(kept)
        with self._room:
            self._give_backs.append((self._clock(), seconds))
            self.given_back += seconds
            if seconds > 0:
                for seq, ticket in self._pending.items():
                    if seq > booking.seq:  # booked after it: behind it on the timeline
                        ticket.forward += seconds
                self._room.notify_all()

    def _wait_turn(self, ticket: _Ticket, started: float) -> tuple[float, int]:
        """The call's turn, booked by this thread or by another of the invocation's in the same write; then
        the wait for it. (seconds waited, the booking's number; 0: no turn booked)."""
        give_up_at = ticket.give_up_at
        with self._room:
            self._queue.append(ticket)
        self._serve(ticket)
        if ticket.outcome == "without":
            return self._without_turn(started), 0
        if ticket.outcome != "turn":
            raise NoTurnError(f"no turn of the shared quota within {give_up_at - started:.0f} s")
        try:
            self._wait_for(ticket)
        finally:
            with self._room:
                del self._booked[ticket.seq]
                del self._pending[ticket.seq]
                self._room.notify_all()
        waited = self._clock() - started
        with self._room:
            self.waited += waited
        return waited, ticket.seq

    def _wait_for(self, ticket: _Ticket) -> None:
        """Until the ticket's turn, brought forward by what replies to this invocation's earlier calls gave
        back meanwhile (``settle``)."""
        while True:
            with self._room:
                delay = ticket.due() - self._clock()
                if delay <= 0:
                    return
                if self._sleep is None:
                    self._room.wait(timeout=delay)
                    continue
            self._sleep(delay)
            with self._room:
                if ticket.due() - self._clock() <= 0:
                    return

    def _serve(self, ticket: _Ticket) -> None:
        """Returns once ``ticket`` has an outcome. One thread of this invocation books at a time (the table
        sees one writer per invocation), and books the turns of every call then waiting, within the lead, in
        one read and one write: a slow table slows the invocation by a round trip, not a round trip a call.
        The table's round trips happen under this lock alone, so a call whose turn has come is never held
        up."""
        while True:
            left = max(0.0, ticket.give_up_at - self._clock())
            if self._booking.acquire(timeout=left):
                try:
                    if not ticket.outcome:
                        self._book_batch(ticket)
                finally:
                    self._booking.release()
                return
            with self._room:
                if not ticket.outcome and not ticket.taken:  # nobody is booking it, and its time is up
                    self._queue.remove(ticket)
                    ticket.outcome = "none"
                while not ticket.outcome:  # a booking of it under way: its outcome comes with the write
                    self._room.wait()
                return

    def _book_batch(self, own: _Ticket) -> None:
        """Books ``own`` (when the lead has room for it) and the calls queued behind it while the lead has
        room, in one write; each ticket gets its outcome. Under the booking lock."""
        with self._room:
            if self._clock() < self._skip_until:  # the table failed while this thread waited to book
                self._queue.remove(own)
                own.outcome = "without"
                return
            while sum(self._booked.values()) >= self.lead:
                left = own.give_up_at - self._clock()
                if left <= 0:
                    self._queue.remove(own)
                    own.outcome = "none"
                    return
                self._room.wait(timeout=left)
            batch, ahead = [own], sum(self._booked.values()) + own.cost
            for other in self._queue:
                if ahead >= self.lead:
                    break
                if other is not own and not other.taken:
                    batch.append(other)
                    ahead += other.cost
            for ticket in batch:
                self._queue.remove(ticket)
                ticket.taken = True
        booking_started = self._clock()
        try:
            turns = self._book(batch)
        except Exception as exc:
            # any error, not only the SDK's: the batch's other calls wait on this thread for an outcome (an
            # item the table cannot give, a client that cannot be built)
            self._table_failed(_error_text(exc))
            turns = None
        took = self._clock() - booking_started
        if turns is not None and took > BOOKING_SECONDS:  # its turns are used; the next go without a while
            self._table_failed(f"slow: a booking took {took:.1f} s")
        with self._room:
            for i, ticket in enumerate(batch):
                sends = turns[i] if turns is not None else None
                if turns is None:
                    ticket.outcome = "without"
                elif sends is None:
                    ticket.outcome = "none"
                else:
                    ticket.send_at, ticket.outcome = sends, "turn"
                    self._bookings += 1
                    ticket.seq = self._bookings
                    self._booked[ticket.seq] = ticket.cost
                    self._pending[ticket.seq] = ticket
                    self.booked += ticket.token_cost
            self._room.notify_all()

    def _without_turn(self, started: float) -> float:
        """The attempt goes without a turn; the time it lost to the table (a slow or failing round trip, the
        booking lock) is counted as waited."""
        waited = self._clock() - started
        with self._room:
            self.without_turns += 1
            self.waited += waited
        return waited

    def _table_failed(self, error: str) -> None:
        """The table is a courtesy between invocations, not a gate the model depends on: without it calls
        go at once, 429s handled as without a shared quota, and the table is tried again after a while.
        Counted; logged once."""
        with self._room:
            self.table_errors += 1
        self._skip_until = self._clock() + TABLE_RETRY_SECONDS
        if self.table_errors == 1:
            logger.warning(
                "shared quota table unusable: calls go without turns",
                extra={"table": self.table, "error": error, "retry_seconds": TABLE_RETRY_SECONDS},
            )

    def _book(self, batch: list[_Ticket]) -> list[tuple[float, float] | None]:
        """The turns of ``batch``, in order, on the table's two timelines (tokens, requests: a call is sent
        when both quotas have refilled for it): read them, write their new ends if nobody moved them since.
        Each ticket's (token turn, request turn); None for a call whose turn would come after its
        ``give_up_at`` (it books nothing)."""
        ends = self._read()
        while True:
            # the clock read after the table: a turn timed before a slow read would start in the past, as
            # if the quota had refilled for longer than it did
            now = self._clock()
            reset = False
            new_ends: dict[str, float] = {}
            for name, end in ends.items():
                if end is not None and end - now > self.horizon:  # no fleet books this far ahead: a clock
                    new_ends[name], reset = now, True
                else:
                    new_ends[name] = end or 0.0
            give_back, folded = self._give_backs_due(now)
            new_ends["tat"] -= give_back  # given back: tokens only (a request is a request)
            burst = self.rate.burst_seconds
            turns: list[tuple[float, float] | None] = []
            for ticket in batch:
                by_tokens = take_turn(new_ends["tat"], now, ticket.token_cost, burst)
                by_requests = take_turn(new_ends["rat"], now, ticket.request_cost, burst)
                if max(by_tokens.send_at, by_requests.send_at) > ticket.give_up_at:
                    turns.append(None)
                    continue
                turns.append((by_tokens.send_at, by_requests.send_at))
                new_ends = {"tat": by_tokens.tat, "rat": by_requests.tat}
            if not any(turns):
                return turns
            current = self._write(ends, new_ends)
            if current is None:
                with self._room:
                    del self._give_backs[:folded]
                if reset:
                    self._reset(ends, now)
                return turns
            with self._room:
                self.conflicts += 1
            ends = current  # what the other invocation wrote, returned by the failed write: no read again

    def _give_backs_due(self, now: float) -> tuple[float, int]:
        """The seconds replies gave back, to fold into the booking being written, and how many entries that
        is; one older than GIVE_BACK_SECONDS gives nothing back (a negative one still counts)."""
        with self._room:
            entries = list(self._give_backs)
        seconds = sum(s for at, s in entries if s < 0 or now - at <= GIVE_BACK_SECONDS)
        return seconds, len(entries)

    def _reset(self, found: dict[str, float | None], now: float) -> None:
        """Counted; logged once (a clock ahead writes again at each of its bookings)."""
        with self._room:
            self.resets += 1
            if self.resets > 1:
                return
        ahead = max((end or 0.0) - now for end in found.values())
        logger.warning(
            "shared quota timeline reset: its end was further ahead than any fleet books (a clock ahead)",
            extra={
                "table": self.table,
                "ahead_seconds": round(ahead, 1),
                "horizon_seconds": self.horizon,
            },
        )

    @property
    def client(self) -> DynamoDBClient:
        """Built on first use (under the booking lock), so a strategy without a region still builds; an
        error building it is a table error like any other."""
        if self._client is None:
            import boto3
            from botocore.config import Config

            # Short: a slow table must not hold calls up (it is skipped for a while instead).
            retries: Any = {"mode": "standard", "max_attempts": 2}
            config = Config(retries=retries, connect_timeout=BOOKING_SECONDS, read_timeout=BOOKING_SECONDS)
            self._client = boto3.client("dynamodb", config=config)
        return self._client

    def _used(self) -> tuple[str, ...]:
        """The timelines kept: ``tat`` for the token quota, ``rat`` for the request quota, those given."""
        quotas = (("tat", self.rate.tokens_per_minute), ("rat", self.rate.requests_per_minute))
        return tuple(name for name, per_minute in quotas if per_minute)

    def _ends(self, item: Mapping[str, Any]) -> dict[str, float | None]:
        used = self._used()
        return {
            name: float(item[name]["N"]) if name in item and name in used else None for name in ("tat", "rat")
        }

    def _read(self) -> dict[str, float | None]:
        item = self.client.get_item(
            TableName=self.table,
            Key={"pk": {"S": self.key}},
            ConsistentRead=True,
            ProjectionExpression="tat, rat",
        ).get("Item")
        return self._ends(item or {})

    def _write(
        self, old: Mapping[str, float | None], new: Mapping[str, float]
    ) -> dict[str, float | None] | None:
        """Move the timelines' ends from ``old`` to ``new``: None if written, else the ends another
        invocation wrote meanwhile (DynamoDB returns the item with the failed condition, at no extra
        cost)."""
        values: dict[str, Any] = {}
        conditions, sets = [], []
        for name in self._used():
            values[f":{name}"] = {"N": _number(new[name])}
            sets.append(f"{name} = :{name}")
            previous = old[name]
            if previous is None:
                conditions.append(f"attribute_not_exists({name})")
            else:
                values[f":old_{name}"] = {"N": _number(previous)}
                conditions.append(f"{name} = :old_{name}")
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"pk": {"S": self.key}},
                UpdateExpression="SET " + ", ".join(sets),
                ConditionExpression=" AND ".join(conditions),
                ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except self.client.exceptions.ConditionalCheckFailedException as exc:
            return self._ends(exc.response.get("Item") or {})
        return None


def _error_text(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", "ClientError"))
    return type(exc).__name__


def _number(value: float) -> str:
    """A DynamoDB number that reads back as the same float (so ``tat = :old`` matches what was read)."""
    return str(Decimal(repr(value)))
