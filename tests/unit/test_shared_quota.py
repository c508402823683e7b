"""The quota shared by every invocation (runtime/context/claude/shared_quota.py): turns on one timeline."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from contextual_kb.local.bedrock_standin import TokenBucket
from contextual_kb.local.quota_table import create_quota_table
from contextual_kb.runtime.context.claude.shared_quota import (
    Booking,
    NoTurnError,
    OutputShare,
    QuotaCounters,
    QuotaRate,
    SharedQuota,
    booked_tokens,
    kept_tokens,
    reserved_tokens,
    take_turn,
)
from tests.support import FakeClock

TABLE = "quota"
# A minute of the quota is 60.5 s of the timeline at the default 0.5 s burst (QuotaRate.minute): the rates
# below are 605 / 605,000 / 60,500 a minute, so that a request is 0.1 s, 10,000 tokens a second, 1,000.


def test_a_turn_on_an_idle_timeline_is_now_and_a_busy_one_queues() -> None:
    assert take_turn(0.0, 100.0, cost=0.1, burst=1.0) == take_turn(50.0, 100.0, cost=0.1, burst=1.0)
    idle = take_turn(0.0, 100.0, cost=0.1, burst=1.0)
    assert idle.send_at == 100.0 and idle.tat == pytest.approx(100.1)
    # five seconds booked ahead: sent when the bucket has refilled for it, a second before its turn ends
    busy = take_turn(105.0, 100.0, cost=0.1, burst=1.0)
    assert busy.tat == pytest.approx(105.1) and busy.send_at == pytest.approx(104.1)
    # a call larger than the bucket needs it full: sent when its turn starts, not before
    large = take_turn(105.0, 100.0, cost=1.5, burst=1.0)
    assert large.send_at == 105.0 and large.tat == pytest.approx(106.5)


@pytest.mark.parametrize("seed", range(5))
def test_calls_sent_at_their_turns_pass_the_stand_ins_bucket(seed: int) -> None:
    """The turns mirror the stand-in's token bucket: a call sent at its turn is let in, whatever its size,
    however many callers, the largest calls included (more than a second of the quota)."""
    draw = random.Random(seed)
    rate = QuotaRate(requests_per_minute=0, tokens_per_minute=60_000, burst_seconds=1.0)  # 1,000 a second
    bucket = TokenBucket(rate.tokens_per_minute, rate.burst_seconds)
    tat, now, sends = 0.0, 1000.0, []
    for _ in range(300):
        now += draw.expovariate(20.0)  # callers asking for turns, faster than the quota lets calls in
        tokens = draw.choice([50, 200, 900, 1_500, 4_000])
        turn = take_turn(tat, now, rate.cost(tokens), rate.burst_seconds)
        tat = turn.tat
        sends.append((turn.send_at, tokens))
    for at, tokens in sorted(sends):
        # turns are exact, the bucket's floats are not: what it holds is compared within a millionth
        wanted = min(tokens, bucket.capacity) - 1e-6
        assert bucket.allows(wanted, at), f"{tokens} tokens refused at {at - 1000:.2f} s"
        bucket.take(tokens)


def _request(*, cached: bool = True, max_tokens: int = 160) -> dict[str, Any]:
    """A 35-byte system prompt, a 3,500-byte document (cached), a 350-byte question: 10 + 1,000 + 100."""
    document: dict[str, Any] = {"type": "text", "text": "x" * 3500}
    if cached:
        document["cache_control"] = {"type": "ephemeral"}
    return {
        "max_tokens": max_tokens,
        "system": [{"type": "text", "text": "s" * 35}],
        "messages": [{"role": "user", "content": [document, {"type": "text", "text": "q" * 350}]}],
    }


def test_a_call_books_what_bedrock_reserves() -> None:
    """Bedrock reserves input (uncached) + cache write + max_tokens at a request's start; a cache read is not
    reserved (../shared/notes/bedrock-quotas.md, sections 1-2), and the burndown multiplies what is settled,
    never the reservation. A call that writes the cached prefix (system prompt and document) reserves it;
    one that reads it reserves the question and max_tokens alone."""
    assert reserved_tokens(_request()) == 10 + 1000 + 100 + 160  # writes the prefix
    assert reserved_tokens(_request(), reads_cache=True) == 100 + 160  # reads it: not reserved
    # AWS's agent toolkit (May 2026) says a read is reserved, then released: the stand-in's switch
    assert reserved_tokens(_request(), reads_cache=True, reserve_cache_reads=True) == 10 + 1000 + 100 + 160
    # a prompt not cached is input whole, whatever the caller expected
    assert reserved_tokens(_request(cached=False), reads_cache=True) == 10 + 1000 + 100 + 160
    # a grouped call's max_tokens is reserved as it is: no burndown at the reservation
    assert reserved_tokens(_request(max_tokens=3520), reads_cache=True) == 100 + 3520


def test_a_call_books_the_larger_of_the_reservation_and_the_expected_settlement() -> None:
    """Bedrock reserves 100 + 160 for a call reading its cache; at 5x, 74 tokens of output settle 100 + 370:
    the booking is the larger, its output estimated from the replies' share of max_tokens."""
    request = _request()
    reserved = reserved_tokens(request, reads_cache=True)
    assert reserved == 260
    assert booked_tokens(request, reserved, output_burndown=5, output_share=74 / 160) == 100 + 5 * 74
    assert booked_tokens(request, reserved, output_burndown=1, output_share=1.0) == 260  # never more at 1x
    assert booked_tokens(request, reserved, output_burndown=5, output_share=0.1) == 260  # the reservation
    assert booked_tokens(request, reserved, output_burndown=15, output_share=2.0) == 100 + 15 * 160  # capped
    share = OutputShare(start=0.5, weight=0.5)
    share.add(40, 160)
    assert share.value == pytest.approx(0.375)
    share.add(10, 0)  # no max_tokens: nothing learned
    assert share.value == pytest.approx(0.375)


def test_a_call_settles_to_what_bedrock_keeps() -> None:
    """Settled: input + cache write + output x burndown; a cache read never counts."""
    # a cache read of the 1,010-token prefix, a 60-token answer: the question and the output kept
    assert kept_tokens(input_tokens=100, cache_write_tokens=0, output_tokens=60) == 160
    assert kept_tokens(input_tokens=100, cache_write_tokens=1010, output_tokens=60, output_burndown=5) == 1410
    assert kept_tokens(input_tokens=100, cache_write_tokens=0, output_tokens=60, output_burndown=15) == 1000


def test_the_cost_is_the_binding_quotas() -> None:
    rate = QuotaRate(requests_per_minute=605, tokens_per_minute=605_000)
    assert rate.cost(100) == pytest.approx(0.1)  # the request quota binds: 10 a second
    assert rate.cost(5_000) == pytest.approx(0.5)  # the token quota binds: 10,000 a second


def _window_peak(sends: list[tuple[float, int]], seconds: float) -> int:
    """The most any ``seconds`` of ``sends`` (time, tokens) hold: a sliding window, which every clock
    minute is one of."""
    sends = sorted(sends)
    peak = total = start = 0
    for at, tokens in sends:
        total += tokens
        while sends[start][0] <= at - seconds:
            total -= sends[start][1]
            start += 1
        peak = max(peak, total)
    return peak


@pytest.mark.parametrize("burst", [0.5, 2.0, 5.0])
@pytest.mark.parametrize("sizes", [(300, 800, 2_000), (300, 800, 2_000, 9_000, 40_000)])
@pytest.mark.parametrize("seed", range(3))
def test_turns_hold_any_minute_within_the_quota_and_use_nine_tenths_of_it(
    seed: int, sizes: tuple[int, ...], burst: float
) -> None:
    """The window Bedrock counts in is not documented (clock minutes or a sliding minute, the two shapes the
    notes find): turns taken as fast as the timeline allows never put more than the quota in any 60 s (a
    call larger than the burst aside: a window may hold it whole where the timeline holds part of it), and
    keep it over 90% used at a burst up to 5 s (``60 / (60 + burst)``). Before, the timeline ran at the
    quota a second and let the burst on top: over the quota in every saturated minute."""
    draw = random.Random(seed)
    tpm = 600_000
    rate = QuotaRate(requests_per_minute=0, tokens_per_minute=tpm, burst_seconds=burst)
    tat, now, sends = 0.0, 1000.0, []
    while now < 1000.0 + 300:  # five minutes, callers asking for turns faster than the quota gives them
        now += draw.expovariate(20.0)
        tokens = draw.choice(sizes)
        turn = take_turn(tat, now, rate.cost(tokens), rate.burst_seconds)
        tat = turn.tat
        sends.append((turn.send_at, tokens))
    larger = max((t for t in sizes if rate.token_cost(t) > burst), default=0)
    peak = _window_peak(sends, 60.0)
    assert peak <= tpm + larger, peak
    used = sum(t for at, t in sends if 1060 <= at < 1240) / 3  # a minute's worth, once saturated
    assert used >= 0.9 * tpm, used


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_quota_table(client, TABLE)
        yield client


def quota(client: Any, clock: FakeClock, **kwargs: Any) -> SharedQuota:
    rate = QuotaRate(requests_per_minute=605, tokens_per_minute=605_000)
    return SharedQuota(TABLE, "model", rate, client=client, clock=clock, sleep=clock.sleep, **kwargs)


def tat(client: Any) -> float:
    """The later of the item's two timelines' ends (tokens: ``tat``, requests: ``rat``)."""
    item = client.get_item(TableName=TABLE, Key={"pk": {"S": "model"}})["Item"]
    return max(float(item[name]["N"]) for name in ("tat", "rat") if name in item)


def test_two_invocations_take_turns_on_one_timeline(dynamodb: Any) -> None:
    clock = FakeClock(1_000.0)
    first, second = quota(dynamodb, clock), quota(dynamodb, clock)
    assert first.wait_turn(100, give_up_at=clock.now + 60) == 0.0  # idle: at once
    assert tat(dynamodb) == pytest.approx(1_000.1)
    # 30 calls of 0.5 s of the token quota each (0.1 s of the request quota), taken in turn by the two:
    # each timeline moves on by each one's cost in its quota
    for i in range(30):
        (first if i % 2 else second).wait_turn(5_000, give_up_at=clock.now + 60)
    assert tat(dynamodb) == pytest.approx(1_000.01 + 15.0)
    # nobody is sent more than a second ahead of the quota (the bucket's burst), nor booked 2 s ahead
    assert clock.now >= tat(dynamodb) - 1.0 - 1e-6


def test_a_turn_another_invocation_took_first_is_taken_again(dynamodb: Any) -> None:
    clock = FakeClock(1_000.0)
    other = quota(dynamodb, clock)

    class Racing:
        """The table's client, with another invocation's turn taken between our read and our write."""

        def __init__(self) -> None:
            self.exceptions = dynamodb.exceptions
            self.raced = False
            self.reads = 0

        def get_item(self, **kwargs: Any) -> Any:
            self.reads += 1
            return dynamodb.get_item(**kwargs)

        def update_item(self, **kwargs: Any) -> Any:
            if not self.raced:
                self.raced = True
                other.wait_turn(1_000, give_up_at=clock.now + 60)
            return dynamodb.update_item(**kwargs)

    racing = Racing()
    ours = quota(racing, clock)  # type: ignore[arg-type]
    ours.wait_turn(1_000, give_up_at=clock.now + 60)
    assert ours.counters().conflicts == 1
    assert racing.reads == 1  # the failed write returned the other's end: booked again without a read
    assert tat(dynamodb) == pytest.approx(1_000.0 + 0.1 + 0.1)  # both turns on the timeline, none lost


def test_no_turn_in_time_is_an_error_and_books_nothing(dynamodb: Any) -> None:
    clock = FakeClock(1_000.0)
    busy = quota(dynamodb, clock)
    for _ in range(10):  # 5 s booked ahead
        busy.wait_turn(5_000, give_up_at=clock.now + 60)
    clock.now -= 5.0
    booked = tat(dynamodb)
    with pytest.raises(NoTurnError, match="no turn of the shared quota within 2 s"):
        quota(dynamodb, clock).wait_turn(100, give_up_at=clock.now + 2.0)
    assert tat(dynamodb) == booked


def test_an_invocations_counters_are_the_difference_and_a_wait_given_no_turn_counts() -> None:
    """The quota lives as long as the environment; an invocation reports the difference of its counters.
    A call that waited for its lead and was given no turn waited too."""
    clock = FakeClock(1_000.0)
    rate = QuotaRate(requests_per_minute=605, tokens_per_minute=0)
    ours = SharedQuota(TABLE, "model", rate, client=object(), clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]
    ours._booked[0] = 5.0  # its lead is full, and stays so: nothing of it is sent in time

    def wait(timeout: float | None = None) -> bool:
        clock.now += timeout or 0.0
        return False

    ours._room.wait = wait  # type: ignore[method-assign]
    before = ours.counters()
    with pytest.raises(NoTurnError):
        ours.wait_turn(100, give_up_at=clock.now + 3.0)
    assert ours.counters() - before == QuotaCounters(waited=3.0)


def test_a_table_that_cannot_be_used_lets_calls_go_counted_and_logged_once(
    dynamodb: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The table is a courtesy between invocations: access denied (or no table) costs no call its model
    context; the calls go at once and 429s are handled as without it."""
    clock = FakeClock(1_000.0)
    rate = QuotaRate(requests_per_minute=605, tokens_per_minute=605_000)
    missing = SharedQuota("no-such-table", "model", rate, client=dynamodb, clock=clock, sleep=clock.sleep)
    assert [missing.wait_turn(100, give_up_at=clock.now + 60) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert missing.table_errors == 1  # then skipped for TABLE_RETRY_SECONDS: a slow table holds nobody up
    clock.now += 31
    assert missing.wait_turn(100, give_up_at=clock.now + 60) == 0.0
    assert missing.table_errors == 2  # tried again
    assert missing.counters() == QuotaCounters(waited=0.0, conflicts=0, table_errors=2, without_turns=4)
    warnings = [r for r in caplog.records if "shared quota table unusable" in r.getMessage()]
    assert len(warnings) == 1


def test_an_invocation_books_no_more_than_its_lead_ahead(dynamodb: Any) -> None:
    """Threads of one invocation: with its lead full, the next waits until one of its calls is sent, so
    every invocation holds about the same share of the timeline ahead."""
    import threading
    import time

    rate = QuotaRate(requests_per_minute=605, tokens_per_minute=0)  # 0.1 s a call
    ours = SharedQuota(TABLE, "model", rate, client=dynamodb, lead=0.3)
    sent: list[float] = []
    ahead: list[float] = []

    def call() -> None:
        ours.wait_turn(10, give_up_at=time.time() + 30)
        with ours._room:
            ahead.append(sum(ours._booked.values()))
        sent.append(time.time())

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(sent) == 8
    assert max(ahead) < 0.3 + 0.1  # booked only while under the lead: under it plus one call
    # eight calls of 0.1 s, sent in turn: the last about 0.8 s after the first less the 0.5 s burst
    assert max(sent) - min(sent) >= 0.2


def test_a_settled_reply_gives_back_what_bedrock_gives_back(dynamodb: Any) -> None:
    """Issue 41, item 10: a call booked at 5,000 tokens that kept 1,000 (a cache read, unused max_tokens)
    gives 0.4 s of the timeline back; the next booking starts from the end it would have had."""
    clock = FakeClock(1_000.0)
    rate = QuotaRate(requests_per_minute=0, tokens_per_minute=605_000)  # 10,000 tokens a second
    ours = SharedQuota(TABLE, "model", rate, client=dynamodb, clock=clock, sleep=clock.sleep)
    booking = ours.book(5_000, give_up_at=clock.now + 60)
    assert booking.tokens == 5_000 and tat(dynamodb) == pytest.approx(1_000.5)
    ours.settle(booking, kept=1_000)
    ours.book(1_000, give_up_at=clock.now + 60)  # the give-back goes with the next booking's write
    assert tat(dynamodb) == pytest.approx(1_000.0 + 0.1 + 0.1)
    counters = ours.counters()
    assert counters.booked == pytest.approx(0.6) and counters.given_back == pytest.approx(0.4)


def test_a_give_back_never_books_the_past_nor_outlives_the_quotas_minute(dynamodb: Any) -> None:
    """What is given back to an idle timeline is lost, as in a full bucket; one older than a minute, folded
    into a later booking, would hand out quota that has long refilled: dropped."""
    clock = FakeClock(1_000.0)
    rate = QuotaRate(requests_per_minute=0, tokens_per_minute=605_000)
    ours = SharedQuota(TABLE, "model", rate, client=dynamodb, clock=clock, sleep=clock.sleep)
    ours.settle(ours.book(5_000, give_up_at=clock.now + 60), kept=0)
    clock.now += 10.0
    ours.book(1_000, give_up_at=clock.now + 60)
    assert tat(dynamodb) == pytest.approx(1_010.1)  # from now, not 0.5 s before it
    for age, given_back in [(30.0, 0.5), (61.0, 0.0)]:
        ours.settle(Booking(waited=0.0, tokens=5_000), kept=0)
        clock.now += age
        now = clock.now
        set_tat(dynamodb, now + 5.0, ("tat",))  # the fleet's queue, 5 s ahead (a token quota only)
        ours.book(1_000, give_up_at=now + 60)
        assert tat(dynamodb) == pytest.approx(now + 5.0 - given_back + 0.1)


def set_tat(client: Any, value: float, names: tuple[str, ...] = ("tat", "rat")) -> None:
    """The timelines' ends at ``value``."""
    ends = {name: {"N": repr(value)} for name in names}
    client.put_item(TableName=TABLE, Item={"pk": {"S": "model"}, **ends})


def test_a_booking_without_a_turn_settles_nothing(dynamodb: Any) -> None:
    clock = FakeClock(1_000.0)
    rate = QuotaRate(requests_per_minute=605, tokens_per_minute=605_000)
    missing = SharedQuota("no-such-table", "model", rate, client=dynamodb, clock=clock, sleep=clock.sleep)
    booking = missing.book(5_000, give_up_at=clock.now + 60)
    assert booking.tokens == 0  # went without a turn: nothing booked, nothing to give back
    missing.settle(booking, kept=100)
    assert missing.counters().given_back == 0.0


class _SlowTable:
    """The table's client, every round trip taking ``seconds`` of the fake clock."""

    def __init__(self, client: Any, clock: FakeClock, seconds: float) -> None:
        self.exceptions = client.exceptions
        self._client, self._clock, self.seconds = client, clock, seconds
        self.calls = 0

    def get_item(self, **kwargs: Any) -> Any:
        self.calls += 1
        self._clock.now += self.seconds
        return self._client.get_item(**kwargs)

    def update_item(self, **kwargs: Any) -> Any:
        self.calls += 1
        self._clock.now += self.seconds
        return self._client.update_item(**kwargs)


def test_a_slow_table_is_a_table_failure_not_a_silent_stall(
    dynamodb: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 41, item 12: at 1.1 s a round trip, one booking (a read and a write) takes 2.2 s, more than
    the lead it books (2 s): the quota's pace is lost without a trace. A booking slower than the bound
    counts as a table failure: its turn is used, then calls go without turns a while. (A booking of 1.8 s,
    under the lead, is not: issue 52, a loaded machine's moto table.)"""
    clock = FakeClock(1_000.0)
    patient = quota(_SlowTable(dynamodb, clock, 0.9), clock)  # type: ignore[arg-type]
    patient.wait_turn(100, give_up_at=clock.now + 60)
    assert patient.counters().table_errors == 0
    slow = _SlowTable(dynamodb, clock, 1.1)
    ours = quota(slow, clock)  # type: ignore[arg-type]
    ours.wait_turn(100, give_up_at=clock.now + 60)
    assert ours.counters().table_errors == 1
    for _ in range(10):
        assert ours.wait_turn(100, give_up_at=clock.now + 60) == 0.0
    assert slow.calls == 2  # one booking, then none while the table is skipped
    assert ours.counters().without_turns == 10
    (warning,) = [r for r in caplog.records if "shared quota table unusable" in r.getMessage()]
    assert warning.__dict__["error"].startswith("slow")
    fast = _SlowTable(dynamodb, clock, 0.01)  # a table at DynamoDB's pace is not a failure
    assert quota(fast, clock).counters().table_errors == 0  # type: ignore[arg-type]
    fine = quota(fast, clock)  # type: ignore[arg-type]
    for _ in range(5):
        fine.wait_turn(100, give_up_at=clock.now + 60)
    assert fine.counters().table_errors == 0 and fine.counters().without_turns == 0


def test_a_timeline_end_beyond_any_fleets_booking_is_reset(
    dynamodb: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 41, item 13: one invocation whose clock runs 600 s ahead books the timeline's end there, and
    nobody else may send for 600 s. No fleet books further ahead than a call may wait for its turn plus
    the largest call (the horizon): an end beyond it is a clock's error, and is reset, counted, logged."""
    clock = FakeClock(1_000.0)
    skewed = FakeClock(1_600.0)
    quota(dynamodb, skewed).wait_turn(100, give_up_at=skewed.now + 60)
    assert tat(dynamodb) == pytest.approx(1_600.1)
    ours = quota(dynamodb, clock, horizon=90.0)
    assert ours.wait_turn(100, give_up_at=clock.now + 60) == 0.0  # at once, not in 600 s
    assert tat(dynamodb) == pytest.approx(1_000.1)
    assert ours.counters().resets == 1
    quota(dynamodb, skewed).wait_turn(100, give_up_at=skewed.now + 60)  # the clock ahead books again
    ours.wait_turn(100, give_up_at=clock.now + 60)
    assert ours.counters().resets == 2
    resets = [r for r in caplog.records if "shared quota timeline reset" in r.getMessage()]
    assert len(resets) == 1  # logged once, counted each time
    # an end within the horizon is a fleet's queue: waited for, not reset
    busy = quota(dynamodb, clock, horizon=90.0)
    set_tat(dynamodb, 1_030.0)
    assert busy.wait_turn(100, give_up_at=clock.now + 60) == pytest.approx(30.0 - 0.5 + 0.1)
    assert busy.counters().resets == 0


def test_calls_waiting_together_are_booked_in_one_round_trip(dynamodb: Any) -> None:
    """Issue 41, item 12: a table slow but under the bound (0.2 s a round trip, 0.4 s a booking) books the
    turns of every call then waiting in one read and one write, so 16 calls are not sent one per 0.4 s."""
    import threading
    import time

    class Slow:
        exceptions = dynamodb.exceptions
        trips = 0

        def get_item(self, **kwargs: Any) -> Any:
            Slow.trips += 1
            time.sleep(0.2)
            return dynamodb.get_item(**kwargs)

        def update_item(self, **kwargs: Any) -> Any:
            Slow.trips += 1
            time.sleep(0.2)
            return dynamodb.update_item(**kwargs)

    rate = QuotaRate(requests_per_minute=60_500, tokens_per_minute=0)  # 1 ms a call: the table binds
    ours = SharedQuota(TABLE, "model", rate, client=Slow())  # type: ignore[arg-type]
    sent: list[float] = []
    started = time.time()

    def call() -> None:
        ours.wait_turn(10, give_up_at=time.time() + 30)
        sent.append(time.time())

    threads = [threading.Thread(target=call) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(sent) == 16
    assert max(sent) - started < 2.5  # one booking at a time, a call each: 6.4 s
    assert Slow.trips <= 8  # a read and a write for several calls at once
    assert ours.counters().table_errors == 0 and ours.counters().without_turns == 0
    assert tat(dynamodb) == pytest.approx(started + 16 * 0.001, abs=1.5)  # every turn on the timeline


def test_a_give_back_brings_the_invocations_later_turns_forward_at_once(dynamodb: Any) -> None:
    """A cached call books its whole prompt (what Bedrock reserves) and gives most of it back when it
    answers: the invocation's next call, booked behind it, is sent then, not when the reservation would
    have run out (an invocation on one large cached document sent one call a reservation, 3x slower)."""
    import threading
    import time

    rate = QuotaRate(requests_per_minute=0, tokens_per_minute=60_500, burst_seconds=0.5)  # 1,000 a second
    ours = SharedQuota(TABLE, "model", rate, client=dynamodb)
    first = ours.book(1_200, give_up_at=time.time() + 30)  # 1.2 s: sent at once, the timeline 1.2 s on
    waited: list[float] = []
    second = threading.Thread(target=lambda: waited.append(ours.wait_turn(100, give_up_at=time.time() + 30)))
    second.start()
    time.sleep(0.2)  # the first call's reply: it kept 100 tokens, 1.1 s given back
    ours.settle(first, kept=100)
    second.join(timeout=10)
    assert waited and waited[0] < 0.5  # its turn was 0.8 s after the first's; brought forward 1.1 s
    assert ours.counters().given_back == pytest.approx(1.1)


def test_each_quota_has_its_own_timeline(dynamodb: Any) -> None:
    """A call binding the token quota and one binding the request quota do not add up: each quota keeps its
    own timeline (``tat``, ``rat``) and a call is sent when both have refilled for it. One timeline of the
    binding quota's cost per call, as before, took 0.5 + 0.1 s for each such pair instead of 0.51 s."""
    clock = FakeClock(1_000.0)
    ours = quota(dynamodb, clock)  # 10 requests and 10,000 tokens a second
    for _ in range(10):
        ours.wait_turn(5_000, give_up_at=clock.now + 60)  # 0.5 s of tokens, 0.1 s of requests
        ours.wait_turn(100, give_up_at=clock.now + 60)  # 0.01 s of tokens, 0.1 s of requests
    item = dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "model"}})["Item"]
    assert float(item["tat"]["N"]) == pytest.approx(1_000.0 + 10 * 0.51)
    assert float(item["rat"]["N"]) == pytest.approx(clock.now + 0.1, abs=0.5)  # requests: never binding


def test_an_unexpected_table_error_leaves_no_call_waiting(dynamodb: Any) -> None:
    """The booking thread books for the calls waiting with it: whatever the table raises (not only the
    SDK's errors), each of them gets an outcome, and the attempts go without turns, counted."""
    import threading
    import time

    class Broken:
        exceptions = dynamodb.exceptions

        def get_item(self, **kwargs: Any) -> Any:
            time.sleep(0.2)  # the other calls queue behind this booking
            raise KeyError("tat")

    rate = QuotaRate(requests_per_minute=605, tokens_per_minute=0)
    ours = SharedQuota(TABLE, "model", rate, client=Broken())  # type: ignore[arg-type]
    done: list[float] = []
    threads = [
        threading.Thread(target=lambda: done.append(ours.wait_turn(10, give_up_at=time.time() + 30)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(done) == 4
    assert ours.counters().table_errors == 1 and ours.counters().without_turns == 4
