"""The Knowledge Base may call the function again with the same event: AWS documents no timeout, retry or
failure scope for the transformation call (aws-facts.md). An identical call, run again or at the same time,
writes the same outputs under the same keys, asks the model nothing it already answered (remembered
contexts), records each pending document once (``DocumentsPending`` counts it once), and a call that fails
never deletes outputs another call of the same event named. The real handler (or two execution
environments side by side), moto S3, the real SDK against the stand-in."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from contextual_kb.local.bedrock_standin import BedrockStandIn
from contextual_kb.runtime import handler
from contextual_kb.runtime.deadline import Deadline
from contextual_kb.runtime.errors import StorageError
from contextual_kb.runtime.models import parse_event
from contextual_kb.runtime.storage import S3BatchStore
from contextual_kb.runtime.transform import Transformation
from tests.conftest import output_lines
from tests.integration.test_claude import (
    BUCKET,
    assert_every_chunk_back,
    big_chunks,
    outputs,
    paragraphs,
    run,
    stage,
)

PENDING = "contextual-kb/pending/"
REMEMBERED = "contextual-kb/contexts/"


def bucket_objects(s3: Any) -> dict[str, bytes]:
    """Every object in the intermediate bucket, by key, with its body."""
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
        for o in page.get("Contents", [])
    ]
    return {key: s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() for key in keys}


def invocation(capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], dict[str, float]]:
    """The last call's summary log line and its metrics (EMF), from what it printed."""
    lines = output_lines(capsys)
    (summary,) = [line for line in lines if line.get("message") == "transformation complete"]
    metrics = {}
    for emf in (line for line in lines if "_aws" in line):  # the cold start has a line of its own
        names = [m["Name"] for d in emf["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]]
        for name in names:  # a metric added more than once in a call is a list of values
            value = emf[name]
            metrics[name] = float(sum(value) if isinstance(value, list) else value)
    return summary, metrics


def test_the_same_call_again_writes_the_same_outputs_and_asks_the_model_nothing(
    s3: Any, standin: BedrockStandIn, captured: pytest.CaptureFixture[str]
) -> None:
    """A retry in a new execution environment: the response and every object in the bucket are the same as
    after the first call (no new output, remembered-context or pending object), and no model request."""
    event, staged = stage(s3, {"ledger.md": big_chunks(6), "notes.md": paragraphs("notes", 3)})
    first = run(event)
    assert_every_chunk_back(s3, first, staged)
    after_first, requests = bucket_objects(s3), standin.stats.requests
    invocation(captured)
    handler.runtime.cache_clear()  # another execution environment: nothing in memory
    second = run(event)
    assert second == first
    assert bucket_objects(s3) == after_first
    assert standin.stats.requests == requests
    summary, metrics = invocation(captured)
    assert summary["model"]["calls"] == 0 and summary["model"]["chunks_remembered"] == 9
    assert metrics["ModelCalls"] == 0 and metrics["ChunksRemembered"] == 9


def test_a_deferred_document_called_again_is_recorded_and_counted_once(
    s3: Any, standin: BedrockStandIn, monkeypatch: pytest.MonkeyPatch, captured: pytest.CaptureFixture[str]
) -> None:
    """CONTEXT_DEFER=always, the same call twice: one pending record per document, the second call's
    refreshing it; DocumentsPending summed over both calls is the number of records."""
    monkeypatch.setenv("CONTEXT_DEFER", "always")
    event, _ = stage(s3, {"a.md": paragraphs("alpha", 3), "b.md": paragraphs("beta", 2)})
    counted = []
    for _ in range(2):
        handler.runtime.cache_clear()
        run(event)
        summary, metrics = invocation(captured)
        counted.append(metrics["DocumentsPending"])
        assert summary["model"]["calls"] == 0
    records = [k for k in bucket_objects(s3) if k.startswith(PENDING)]
    assert len(records) == 2
    assert counted == [2, 0] and sum(counted) == len(records)
    assert summary["model"]["documents_pending_refreshed"] == 2
    assert standin.stats.requests == 0


def _serialized_s3(monkeypatch: pytest.MonkeyPatch, parties: int) -> tuple[threading.Event, threading.Event]:
    """moto checks ``If-None-Match`` and stores in two steps, which two threads can interleave; S3 does it
    at once (the first of concurrent conditional writes wins: conditional-writes.html). Each PutObject is
    made atomic here, and the pending records' conditional writes wait for each other, while the event
    returned is set, so that they meet for certain. Only those: how many other conditional writes a call
    makes (remembered contexts, which a call's own writer threads make beside its pending record) depends
    on what the other call wrote first, so pairing every one let a loaded machine leave one write waiting
    for a partner that never came (issue 54). Also returned: an event set once contexts are remembered."""
    from moto.s3.responses import S3Response

    lock = threading.Lock()
    meet = threading.Barrier(parties, timeout=30)
    meeting, remembered = threading.Event(), threading.Event()
    meeting.set()
    original: Callable[..., Any] = S3Response.put_object

    def put_object(self: Any) -> Any:
        key = self.parse_key_name()
        if key.startswith(PENDING) and self.headers.get("If-None-Match") == "*" and meeting.is_set():
            meet.wait()
        with lock:
            response = original(self)
        if key.startswith(REMEMBERED):
            remembered.set()
        return response

    monkeypatch.setattr(S3Response, "put_object", put_object)
    return meeting, remembered


@pytest.mark.parametrize("second_starts", ["at_once", "after_the_first_remembered"])
def test_two_identical_calls_at_once_write_the_same_outputs_and_one_pending_record(
    s3: Any, standin: BedrockStandIn, monkeypatch: pytest.MonkeyPatch, second_starts: str
) -> None:
    """Two execution environments run the same event side by side (the KB calling again while the first
    call still runs): both responses are the same, every chunk comes back, the one pending document (its
    model calls refused) is recorded once and counted once, and a third call asks the model nothing for the
    document both remembered. ``after_the_first_remembered``: the second starts once the first has written
    its remembered contexts, so it reads them (what a busy machine's scheduling did, issue 54)."""
    standin.configure(fault_for=lambda seen: 400 if "Notes section" in seen.document else None)
    event, staged = stage(s3, {"ledger.md": big_chunks(4), "notes.md": paragraphs("notes", 2)})
    meeting, remembered = _serialized_s3(monkeypatch, parties=2)
    results: list[tuple[dict[str, Any], Any]] = []
    errors: list[BaseException] = []

    def call() -> None:
        try:
            settings, strategy, store = handler.runtime.__wrapped__()  # an environment of its own
            response, stats = Transformation(settings, strategy, store).run(
                parse_event(event), Deadline.from_remaining(300, reserve_seconds=10)
            )
            results.append((response.dump(), stats))
        except BaseException as exc:  # re-raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(2)]
    threads[0].start()
    if second_starts == "after_the_first_remembered":
        assert remembered.wait(timeout=60), "the first call wrote no remembered contexts"
    threads[1].start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    (first, first_stats), (second, second_stats) = results
    assert first == second
    items = assert_every_chunk_back(s3, first, staged)
    assert sum(1 for i in items if "Notes section" in i["contentBody"]) == 2
    records = [k for k in bucket_objects(s3) if k.startswith(PENDING)]
    assert len(records) == 1
    counts = sorted(s.model.documents_pending for s in (first_stats, second_stats))
    assert counts == [0, 1]
    assert sorted(s.model.documents_pending_refreshed for s in (first_stats, second_stats)) == [0, 1]
    # A third call: the ledger's contexts are remembered (both wrote the same); only the notes are asked.
    meeting.clear()
    asked = len(standin.seen)
    handler.runtime.cache_clear()
    third = run(event)
    assert outputs(s3, third) == outputs(s3, first)
    documents = [b["messages"][0]["content"][0]["text"] for b in standin.seen[asked:]]
    assert documents and all("Notes section" in d for d in documents)


def test_a_call_failing_after_another_succeeded_deletes_none_of_its_outputs(
    s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The KB's first call succeeded (its response names the outputs); a second call of the same event
    fails on its last write. The outputs the first response named are all still there, as written."""
    event, staged = stage(s3, {"a.md": paragraphs("alpha", 4), "b.md": paragraphs("beta", 4)}, per_batch=2)
    first = run(event)
    named = [ref["key"] for f in first["outputFiles"] for ref in f["contentBatches"]]
    before = {key: s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() for key in named}
    original = S3BatchStore.write

    def write(self: S3BatchStore, bucket: str, key: str, body: bytes) -> None:
        if key == named[-1]:
            raise StorageError(f"s3://{bucket}/{key}: cannot write output batch (InternalError)")
        original(self, bucket, key, body)

    monkeypatch.setattr(S3BatchStore, "write", write)
    handler.runtime.cache_clear()
    with pytest.raises(StorageError):
        run(event)
    after = {key: s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() for key in named}
    assert after == before
    assert_every_chunk_back(s3, first, staged)


def test_a_call_that_learned_less_does_not_erase_what_a_concurrent_call_remembered(
    s3: Any, standin: BedrockStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B starts first and finds nothing remembered; A, the same event in another environment, runs to the
    end and remembers the document's 4 contexts; then B ends with 2 (its model refused the others) and
    writes the document's contexts. A's 4 stay remembered: a third call asks the model nothing."""
    from contextual_kb.local.bedrock_standin import StandInConfig

    event, staged = stage(s3, {"ledger.md": paragraphs("ledger", 4)})
    b_calling, a_done = threading.Event(), threading.Event()

    def refuse_half_after_a(seen: Any) -> int | None:
        b_calling.set()
        a_done.wait(60)
        return 400 if ("section 2." in seen.question or "section 3." in seen.question) else None

    other = BedrockStandIn(StandInConfig(latency_ms=2.0, per_token_ms=0.0, record=True)).start()
    try:
        other.configure(fault_for=refuse_half_after_a)
        monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", other.url)
        b_settings, b_strategy, b_store = handler.runtime.__wrapped__()  # B's environment, B's model
        monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", standin.url)
        handler.runtime.cache_clear()
        b_errors: list[BaseException] = []

        def call_b() -> None:
            try:
                Transformation(b_settings, b_strategy, b_store).run(
                    parse_event(event), Deadline.from_remaining(300, reserve_seconds=10)
                )
            except BaseException as exc:  # re-raised below
                b_errors.append(exc)

        b = threading.Thread(target=call_b)
        b.start()
        assert b_calling.wait(60)  # B has read the remembered contexts (none) and is asking its model
        assert_every_chunk_back(s3, run(event), staged)  # A, to the end: 4 contexts remembered
        a_done.set()
        b.join(timeout=120)
        assert not b_errors, b_errors
        asked = len(standin.seen)
        handler.runtime.cache_clear()
        assert_every_chunk_back(s3, run(event), staged)
        assert len(standin.seen) == asked  # the third call found all 4 remembered
    finally:
        a_done.set()
        other.stop()
