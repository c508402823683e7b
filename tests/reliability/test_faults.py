"""Fault injection end to end (contextual_kb/local/faults.py): the real handler, moto S3, the real anthropic
SDK against the Bedrock stand-in, faults injected while it runs. For every scenario: no chunk lost,
duplicated or altered, metadata kept, the deadline kept, and every chunk without a model context counted
the same in the summary log, the per-file warnings and the ContextFallbacks metric.

The deadline is judged by what the code controls, on its own clock (``Outcome.deadline_problems``): the
hard stop it computed, the model time it kept, the waits for quota turns it allowed. Never by the seconds
the handler took: a loaded machine (8 processes on 2 cores) stretches those without the code missing
anything; the wall-clock proof is ``bench/reliability.py``'s, run on a quiet machine."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from contextual_kb.local import faults
from contextual_kb.local.bedrock_standin import BedrockStandIn

SCENARIOS = {scenario.name: scenario for scenario in faults.scenarios(faults.QUICK)}


@pytest.fixture
def fresh_standin(s3: object) -> Iterator[BedrockStandIn]:
    server = BedrockStandIn(faults.standin_config()).start()
    try:
        yield server
    finally:
        server.stop()


def run(name: str, standin: BedrockStandIn) -> faults.Outcome:
    scenario = SCENARIOS[name]
    outcome = faults.run(scenario, standin)
    assert outcome.problems(scenario.expect_failure, scenario.must_see, scenario.must_not_see) == []
    return outcome


def test_the_catalogue_names_every_fault_the_issue_lists() -> None:
    assert set(SCENARIOS) == {
        "baseline",
        "throttling storm",
        "5xx bursts",
        "hanging calls",
        "slow model, short time",
        "malformed answers",
        "cache expiring mid-run",
        "S3 writes failing, then succeeding",
        "S3 writes failing for good",
        "slow S3, long tail",
        "heading-dense document, short time",
        "one failing document",
        "quota below one request",
        "quota below one request, shared",
        "throttled for a minute",
    }
    assert {s.name for s in faults.scenarios(faults.FULL)} == {*SCENARIOS, "S3 writes failing twice each"}


def test_baseline(fresh_standin: BedrockStandIn) -> None:
    outcome = run("baseline", fresh_standin)
    assert outcome.from_model == outcome.chunks_in == 100 and outcome.degraded == 0


def test_throttling_storm(fresh_standin: BedrockStandIn) -> None:
    outcome = run("throttling storm", fresh_standin)
    # How many calls the 3 s storm meets is the machine's (10 at a load of 18 on 2 cores, more alone): that it
    # met some, and that each 429 is counted as the stand-in sent it, is what the storm tests.
    assert outcome.standin["throttled"] > 0
    assert outcome.model["throttles"] == outcome.standin["throttled"]
    assert outcome.from_model + outcome.degraded == 100


def test_5xx_bursts(fresh_standin: BedrockStandIn) -> None:
    outcome = run("5xx bursts", fresh_standin)
    assert outcome.standin["faults"] > 0
    assert outcome.model["retries"] > 0


def test_hanging_calls(fresh_standin: BedrockStandIn) -> None:
    outcome = run("hanging calls", fresh_standin)
    assert outcome.standin["hangs"] > 0
    assert outcome.model["failed_calls"].get("transient", 0) + outcome.model["retries"] > 0


def test_slow_model_against_a_short_deadline(fresh_standin: BedrockStandIn) -> None:
    outcome = run("slow model, short time", fresh_standin)
    assert outcome.degraded > 0 and outcome.fallbacks_logged.get("deadline", 0) > 0
    # the handler's own deadline, not just the clock: the hard stop it computed, the model given up in time
    assert outcome.deadline_problems() == []


def test_malformed_answers(fresh_standin: BedrockStandIn) -> None:
    outcome = run("malformed answers", fresh_standin)
    assert outcome.fallbacks_logged.get("answer_rejected", 0) > 0
    assert sum(outcome.model["answers_rejected"].values()) == outcome.fallbacks_logged["answer_rejected"]


def test_cache_entries_expiring_mid_run(fresh_standin: BedrockStandIn) -> None:
    outcome = run("cache expiring mid-run", fresh_standin)
    assert outcome.degraded == 0
    # Remembering is off (CONTEXT_MEMORY_PREFIX=""), so the cache's expiry is what every call meets.
    assert outcome.model["contexts_remembered_written"] == 0 and outcome.model["chunks_remembered"] == 0
    assert outcome.remembered_objects == 0
    assert outcome.standin["cache_writes"] > 4  # some prefixes written again after expiring
    assert outcome.model["cache_write_tokens"] == outcome.standin["cache_write_tokens"]


def test_s3_writes_retried(fresh_standin: BedrockStandIn) -> None:
    outcome = run("S3 writes failing, then succeeding", fresh_standin)
    # 10 files of 10 chunks, 5 a batch: 20 outputs; 1 in 5 (4) failing twice, then written.
    assert outcome.put_failures == 2 * 4
    assert outcome.put_attempts == 20 + 2 * 4


def test_s3_writes_failing_for_good_fail_loudly(fresh_standin: BedrockStandIn) -> None:
    outcome = run("S3 writes failing for good", fresh_standin)
    assert "cannot write output batch (InternalError)" in outcome.error
    # S3_MAX_ATTEMPTS for an object, then the call fails (writes run in parallel: a few objects are tried)
    assert outcome.put_most_per_object == 3
    # What the failed call wrote is not deleted (a concurrent call of the same event may own the same keys:
    # tests/integration/test_repeated_calls.py pins it); no response names it, a retry overwrites it.
    assert outcome.remembered_objects >= 0


def test_a_slow_s3_and_a_long_tail_still_end_before_the_lambda(fresh_standin: BedrockStandIn) -> None:
    """Everything left once the model stops (fallbacks, re-reads, 240 writes at 40 ms) is budgeted: the model
    stops early enough, and reads and writes run in parallel."""
    outcome = run("slow S3, long tail", fresh_standin)
    assert outcome.deadline_problems() == []
    assert outcome.s3_most_in_flight > 1  # the tail's reads and writes ran side by side
    # The model was stopped in time, for the tail: how many chunks it answered first is the machine's (most
    # on a quiet one; none at a load of 20 on 2 cores, where the tail measured through moto fills the time).
    assert outcome.degraded > 0 and outcome.fallbacks_logged.get("deadline", 0) == outcome.degraded


def test_a_heading_dense_document_against_a_short_lambda(fresh_standin: BedrockStandIn) -> None:
    """A 12 MB manual with 46,000 headings: the outline is linear, and the structural pass keeps the deadline
    too (what it cannot outline in time gets the document-level context, counted). 12 MB and 2.5 s, so that
    the whole pass takes longer than the compute time it is given (one that never looked at it passed at
    6 MB and 3 s, and at 12 MB and 3 s when the setup before it was quick)."""
    outcome = run("heading-dense document, short time", fresh_standin)
    # the structural pass kept its compute time (what it could not outline got the document-level context)
    assert outcome.deadline_problems() == []
    assert outcome.chunks_out == outcome.chunks_in > 7000
    assert outcome.degraded == outcome.chunks_in  # no model context in 2.5 s at 2 s a call


def test_one_failing_document_does_not_starve_the_others(fresh_standin: BedrockStandIn) -> None:
    outcome = run("one failing document", fresh_standin)
    failing = "s3://reliability-source/docs/file0.md"
    assert outcome.degraded_by_file == {failing: 20}  # its own chunks, and only those
    assert outcome.from_model == 100  # the 5 healthy documents: every chunk from the model
    assert outcome.fallbacks_logged == {"model_error": 20}


def test_a_quota_below_one_request_per_invocation_ends_with_every_chunk_back(
    fresh_standin: BedrockStandIn,
) -> None:
    """One request a minute: the invocation cannot have a model context for most chunks; it ends before its
    deadline with every chunk back, those without a model context given the structural one, counted and
    logged with their reason."""
    outcome = run("quota below one request", fresh_standin)
    assert outcome.chunks_out == outcome.chunks_in == 100
    assert outcome.degraded > 0 and outcome.degraded == sum(outcome.fallbacks_logged.values())
    assert outcome.from_model + outcome.degraded == outcome.chunks_in


def test_a_quota_below_one_request_shared_waits_for_turns_instead_of_429s(
    fresh_standin: BedrockStandIn,
) -> None:
    """The same quota shared through its table: the one call the quota allows is made, the others are given
    no turn before the deadline and never sent (no 429), and every chunk comes back, counted and logged."""
    outcome = run("quota below one request, shared", fresh_standin)
    # among them: no call let wait for a turn past the model's time
    assert outcome.deadline_problems() == []
    assert outcome.chunks_out == outcome.chunks_in == 100
    assert outcome.standin["throttled"] == 0 and outcome.standin["requests"] == outcome.from_model <= 1
    assert outcome.degraded == 100 - outcome.from_model == sum(outcome.fallbacks_logged.values())
    # How far it got is the machine's: at load 9-13 the setup took the 5 s before the hard stop, and the code
    # started no call (its choice, counted as `deadline` fallbacks). Each step it took is checked: a call the
    # deadline let start asked for a turn first; the turn given was the quota's one, sent and answered.
    if outcome.calls_allowed:
        assert outcome.quota_bookings >= 1
    if outcome.quota_turns:
        assert outcome.quota_turns == 1 and outcome.from_model == 1


def test_a_shared_quota_on_a_loaded_machine_still_takes_turns(
    fresh_standin: BedrockStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table here is moto in this process: on a loaded machine a booking took over 2 s, the bound for
    DynamoDB's, the table was skipped as slow and the calls went without turns (15 refused: issue 54's busy
    runs). The harness judges the code, not the machine's speed: each read slowed past the bound as that
    machine did, the calls still wait for turns and none is refused."""
    from contextual_kb.runtime.context.claude import shared_quota

    read, bound = shared_quota.SharedQuota._read, shared_quota.BOOKING_SECONDS

    def slow_read(quota: shared_quota.SharedQuota) -> dict[str, float | None]:
        time.sleep(bound + 0.2)
        return read(quota)

    monkeypatch.setattr(shared_quota.SharedQuota, "_read", slow_read)
    outcome = run("quota below one request, shared", fresh_standin)
    assert outcome.chunks_out == outcome.chunks_in == 100 and outcome.quota_bookings >= 1
    assert outcome.standin["throttled"] == 0 and outcome.from_model <= 1


def test_throttled_for_a_while_then_served(fresh_standin: BedrockStandIn) -> None:
    """Every call answered 429 for a while: the calls wait and are asked again, none is lost; once the
    throttling stops, the model answers."""
    outcome = run("throttled for a minute", fresh_standin)
    # At least the first wave (MAX_CONCURRENCY=4) was throttled; how many more depends on the machine's load
    # (10 on a busy CI run, dozens alone): the backoff, not the count, is what the storm tests.
    assert outcome.standin["throttled"] >= 4
    assert outcome.chunks_out == outcome.chunks_in
    assert outcome.from_model + outcome.degraded == outcome.chunks_in
    assert outcome.from_model > 0
