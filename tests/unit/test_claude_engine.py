"""The claude engine's loop with a scripted model client (no HTTP): failure paths found in review."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from contextual_kb.runtime.context.base import Invocation, SourceDocument
from contextual_kb.runtime.context.claude.accounting import Usage
from contextual_kb.runtime.context.claude.client import ModelCallError, Reply
from contextual_kb.runtime.context.claude.engine import ClaudeStrategy
from contextual_kb.runtime.context.claude.shared_quota import reserved_tokens
from contextual_kb.runtime.deadline import Deadline
from contextual_kb.runtime.documents import assemble
from contextual_kb.runtime.settings import Settings

Script = Callable[[dict[str, Any], int], Reply]  # (request, call number) -> reply, or raise


class FakeClient:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.calls = 0
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def invoke(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            self.calls += 1
            number = self.calls
            self.requests.append(request)
        return self.script(request, number)


def reply(text: str = "A context.") -> Reply:
    return Reply(text, Usage(10, 0, 0, 5), "end_turn", 0.001, attempts=1, throttles=0)


def error(kind: str, status: int) -> ModelCallError:
    return ModelCallError(kind, f"{status}", status=status, attempts=1, throttles=int(status == 429))  # type: ignore[arg-type]


def chunk_of(request: dict[str, Any]) -> str:
    match = re.search(r"<chunk>\n(.*?)\n</chunk>", request["messages"][0]["content"][1]["text"], re.DOTALL)
    return match.group(1) if match else ""


def document(name: str, chunks: list[str]) -> SourceDocument:
    return SourceDocument(f"s3://src/{name}", name, {}, assemble(chunks), keys=(f"{name}_1.JSON",))


def strategy(client: FakeClient, **env: str) -> ClaudeStrategy:
    settings = Settings.from_env({"CONTEXT_MEMORY_PREFIX": "", "MODEL_REGION": "us-east-1", **env})
    return ClaudeStrategy(settings, client=client)  # type: ignore[arg-type]


def run(
    engine: ClaudeStrategy, documents: list[SourceDocument], seconds: float | None = 20.0
) -> tuple[list[list[str | None]], Invocation]:
    deadline = (
        Deadline.unlimited() if seconds is None else Deadline.from_remaining(seconds, reserve_seconds=0)
    )
    invocation = Invocation(bucket="", deadline=deadline)
    results = [
        [c.text if c else None for c in result.contexts]
        for result in engine.contextualize(documents, invocation)
    ]
    return results, invocation


def test_a_throttled_probe_frees_the_breaker_and_the_run_completes() -> None:
    def script(request: dict[str, Any], number: int) -> Reply:
        if number <= 2:
            raise error("transient", 503)
        if number == 3:
            raise error("throttled", 429)  # the probe
        return reply()

    engine = strategy(
        FakeClient(script), BREAKER_THRESHOLD="2", BREAKER_COOLDOWN_SECONDS="0", MAX_CONCURRENCY="1"
    )
    results, invocation = run(engine, [document("a.md", ["one chunk", "two chunk", "three chunk"])])
    assert results == [["A context."] * 3]
    assert dict(invocation.accounting.fallbacks) == {}


def test_throttles_do_not_use_up_the_transient_retries() -> None:
    outcomes = iter([error("throttled", 429), error("throttled", 429), error("transient", 503)])

    def script(request: dict[str, Any], number: int) -> Reply:
        failure = next(outcomes, None)
        if failure is not None:
            raise failure
        return reply()

    results, invocation = run(strategy(FakeClient(script), ON_MODEL_ERROR="fail"), [document("a.md", ["x"])])
    assert results == [["A context."]]
    assert invocation.accounting.requeued_calls == 3


def test_a_request_always_throttled_does_not_starve_the_others() -> None:
    def script(request: dict[str, Any], number: int) -> Reply:
        if chunk_of(request) == "the greedy chunk":
            raise error("throttled", 429)
        return reply()

    engine = strategy(FakeClient(script), MAX_CONCURRENCY="1")
    chunks = ["the greedy chunk", *(f"chunk number {i}" for i in range(8))]
    results, invocation = run(engine, [document("a.md", chunks)], seconds=3.0)
    assert results[0][1:] == ["A context."] * 8
    assert results[0][0] is not None and results[0][0] != "A context."  # the structural fallback
    assert dict(invocation.accounting.fallbacks) == {"deadline": 1}


def test_a_request_never_let_in_holds_the_others_a_few_tries_then_gives_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A starving call holds the invocation's other calls for a few tries (scheduling.HOLDS), not for all of
    its MAX_THROTTLED_CALLS: the others are answered, it falls back for throttling."""
    from contextual_kb.runtime.context.claude import engine as engine_module

    monkeypatch.setattr(engine_module, "_THROTTLE_PAUSE", 0.01)
    monkeypatch.setattr(engine_module, "_MAX_THROTTLE_PAUSE", 0.04)

    def script(request: dict[str, Any], number: int) -> Reply:
        if chunk_of(request) == "the greedy chunk":
            raise error("throttled", 429)
        time.sleep(0.01)  # the others take longer than its waits: they are still there when it starves
        return reply()

    client = FakeClient(script)
    engine = strategy(client, MAX_CONCURRENCY="1")
    others = [f"chunk number {i}" for i in range(30)]  # a later document: they go after it when it is ready
    results, invocation = run(
        engine, [document("a.md", ["the greedy chunk"]), document("b.md", others)], seconds=20.0
    )
    assert results[1] == ["A context."] * 30
    assert dict(invocation.accounting.fallbacks) == {"model_throttled": 1}
    greedy = [chunk_of(r) == "the greedy chunk" for r in client.requests]
    last_other = max(i for i, g in enumerate(greedy) if not g)
    in_a_row = longest = 0
    for is_greedy in greedy[:last_other]:
        in_a_row = in_a_row + 1 if is_greedy else 0
        longest = max(longest, in_a_row)
    # its first tries and its held ones (STARVING + HOLDS = 6), then it waits its turn among the others;
    # held for all its tries, it would make 39 in a row
    assert longest <= 10


def test_no_region_is_a_model_failure_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    engine = ClaudeStrategy(Settings.from_env({"CONTEXT_MEMORY_PREFIX": ""}))  # a real client, built lazily
    results, invocation = run(engine, [document("a.md", ["x", "y"])])
    assert all(text for text in results[0])
    assert dict(invocation.accounting.fallbacks) == {"model_unavailable": 2}


def test_grouped_chunks_starting_at_the_same_place_both_get_a_marker() -> None:
    def script(request: dict[str, Any], number: int) -> Reply:
        wanted = re.search(r"Chunks: ([\d, ]+)\.", request["messages"][0]["content"][1]["text"])
        assert wanted is not None
        numbers = [int(n) for n in wanted.group(1).split(", ")]
        document_text = request["messages"][0]["content"][0]["text"]
        return reply(
            "\n".join(
                f'<context chunk="{n}">Context {n}.</context>'
                for n in numbers
                if re.search(rf"⟪chunk {n} [0-9a-f]{{8}}⟫", document_text)
            )
        )

    engine = strategy(FakeClient(script), CONTEXT_MODE="grouped")
    results, invocation = run(engine, [document("a.md", ["same text here", "same text here", "other"])])
    assert results == [["Context 1.", "Context 2.", "Context 3."]]
    assert dict(invocation.accounting.fallbacks) == {}


def test_an_unlimited_deadline_with_remembered_contexts(s3: Any) -> None:
    s3.create_bucket(Bucket="memory-bucket")
    settings = Settings.from_env({"MODEL_REGION": "us-east-1"})
    engine = ClaudeStrategy(settings, client=FakeClient(lambda request, number: reply()))  # type: ignore[arg-type]
    invocation = Invocation(bucket="memory-bucket", deadline=Deadline.unlimited())
    results = list(engine.contextualize([document("a.md", ["x", "y"])], invocation))
    assert [c.text for c in results[0].contexts if c] == ["A context."] * 2
    assert invocation.accounting.contexts_remembered_written == 2


def test_a_remembered_object_that_is_not_ours_is_ignored(s3: Any) -> None:
    from contextual_kb.runtime.context.claude.memory import ContextMemory

    s3.create_bucket(Bucket="memory-bucket")
    memory = ContextMemory(s3)
    for body in (b"null", b"[]", b'"x"', b'{"version": 1, "contexts": []}', b"not json at all"):
        s3.put_object(Bucket="memory-bucket", Key="k.json", Body=body)
        if body == b"not json at all":
            with pytest.raises(Exception, match="cannot read remembered contexts"):
                memory.load("memory-bucket", "k.json")
        else:
            assert not memory.load("memory-bucket", "k.json")


class BookingClient(FakeClient):
    """Records what each call books of the shared quota (``quota_tokens``)."""

    def __init__(self, script: Script) -> None:
        super().__init__(script)
        self.booked: list[tuple[bool, int]] = []  # (the request marks its document cached, tokens booked)

    def invoke(self, request: dict[str, Any], **quota: Any) -> Reply:  # type: ignore[override]
        marked = "cache_control" in request["messages"][0]["content"][0]
        with self._lock:
            self.booked.append((marked, quota.get("quota_tokens", -1)))
        return super().invoke(request)


def test_a_call_that_reads_its_cached_document_books_no_read() -> None:
    """Issue 52: Bedrock reserves input + cache write + max_tokens, not a cache read. The first call of a
    cached document writes it and books it; the others read it and book their question and max_tokens only
    (before: every call booked the document, which starves per-chunk mode on cached documents)."""
    client = BookingClient(lambda request, n: reply())
    quota = {"MODEL_QUOTA_TABLE": "quota", "MODEL_TOKENS_PER_MINUTE": "6000000", "MIN_CACHE_TOKENS": "200"}
    # output at 1x: what a call books is what Bedrock reserves (booked_tokens: never less)
    engine = strategy(client, **quota, MODEL_OUTPUT_BURNDOWN="1")
    chunks = [f"Section {i}. " + "The ledger records every payment twice. " * 20 for i in range(4)]
    run(engine, [document("ledger.md", chunks)])
    assert len(client.booked) == 4 and all(marked for marked, _ in client.booked)
    first, *others = [tokens for _, tokens in client.booked]
    whole = reserved_tokens(client.requests[0])
    assert first == whole  # the write: system prompt, document, question, max_tokens
    for request, tokens in zip(client.requests[1:], others, strict=True):
        assert tokens == reserved_tokens(request, reads_cache=True) < whole / 3


def test_an_rpm_aws_does_not_list_is_ignored_with_one_line_at_cold_start(
    captured: pytest.CaptureFixture[str],
) -> None:
    """Issue 52: MODEL_REQUESTS_PER_MINUTE for a model AWS lists no RPM for (Opus 4.7) is ignored, said once
    when the strategy is built (the cold start); alone, no quota is shared; a model with one keeps it."""
    from tests.conftest import output_lines

    client = FakeClient(lambda request, n: reply())
    opus = {"MODEL_ID": "global.anthropic.claude-opus-4-7", "MODEL_QUOTA_TABLE": "quota"}
    engine = strategy(client, **opus, MODEL_REQUESTS_PER_MINUTE="500", MODEL_TOKENS_PER_MINUTE="400000")
    assert engine.quota is not None and engine.quota.rate.requests_per_minute == 0
    assert engine.quota.rate.tokens_per_minute == 400_000
    assert strategy(client, **opus, MODEL_REQUESTS_PER_MINUTE="500").quota is None
    haiku = strategy(client, MODEL_QUOTA_TABLE="quota", MODEL_REQUESTS_PER_MINUTE="500")
    assert haiku.quota is not None and haiku.quota.rate.requests_per_minute == 500
    warnings = [line["message"] for line in output_lines(captured) if line.get("level") == "WARNING"]
    assert warnings == [
        "MODEL_REQUESTS_PER_MINUTE=500 ignored: AWS lists no requests-per-minute quota for "
        "global.anthropic.claude-opus-4-7 (Bedrock enforces none for some models since 2026-05-27): remove "
        "it; the shared quota counts MODEL_TOKENS_PER_MINUTE alone",
        "MODEL_REQUESTS_PER_MINUTE=500 ignored: AWS lists no requests-per-minute quota for "
        "global.anthropic.claude-opus-4-7 (Bedrock enforces none for some models since 2026-05-27): remove "
        "it; without MODEL_TOKENS_PER_MINUTE the shared quota is off",
    ]


def test_the_burndown_goes_to_fifteen() -> None:
    """Opus 4.8 burns 15 quota tokens an output token (issue 52); more is refused, naming the variable."""
    from contextual_kb.runtime.settings import ConfigurationError

    assert Settings.from_env({"MODEL_OUTPUT_BURNDOWN": "15"}).model_output_burndown == 15
    with pytest.raises(ConfigurationError, match="MODEL_OUTPUT_BURNDOWN"):
        Settings.from_env({"MODEL_OUTPUT_BURNDOWN": "16"})


def test_a_unit_whose_read_read_nothing_books_its_prefix_again() -> None:
    """A document the engine counts as cacheable that Bedrock did not cache (its real minimum above the
    table's, or the entry evicted): a call expected to read it read nothing, so the calls after it book the
    prefix, as Bedrock reserves it; a read coming back again stops it."""

    def script(request: dict[str, Any], number: int) -> Reply:
        read = 0 if number == 2 else 1000  # the second call (the first read) reads nothing
        return Reply("A context.", Usage(10, 0, read, 5), "end_turn", 0.001, attempts=1, throttles=0)

    client = BookingClient(script)
    settings = {"MODEL_QUOTA_TABLE": "quota", "MODEL_TOKENS_PER_MINUTE": "6000000", "MIN_CACHE_TOKENS": "200"}
    engine = strategy(client, MAX_CONCURRENCY="1", MODEL_OUTPUT_BURNDOWN="1", **settings)
    chunks = [f"Section {i}. " + "The ledger records every payment twice. " * 20 for i in range(5)]
    run(engine, [document("ledger.md", chunks)])
    booked = [tokens for _, tokens in client.booked]
    whole = [reserved_tokens(r) for r in client.requests]
    # written; expected to read (read nothing); booked whole (read again); read; read
    assert [b == w for b, w in zip(booked, whole, strict=True)] == [True, False, True, False, False]


def test_a_call_books_what_it_is_expected_to_settle_when_more_than_bedrock_reserves() -> None:
    """At Haiku's 5x a context keeps more than max_tokens reserved: a call books its output as the replies
    so far used of their max_tokens, at 5x (half of it before any reply), so the timeline is not behind what
    Bedrock counts while calls run."""
    client = BookingClient(lambda request, n: reply())  # 5 output tokens a reply
    quota = {"MODEL_QUOTA_TABLE": "quota", "MODEL_TOKENS_PER_MINUTE": "6000000"}
    engine = strategy(client, MAX_CONCURRENCY="1", **quota)
    chunks = [f"Section {i}. short." for i in range(30)]
    run(engine, [document("notes.md", chunks)])
    booked = [tokens for _, tokens in client.booked]
    reserved = [reserved_tokens(r) for r in client.requests]
    first_output = 5 * 80  # half of the 160 max_tokens at 5x: no reply yet
    assert booked[0] == reserved[0] - 160 + first_output
    assert all(b >= r for b, r in zip(booked, reserved, strict=True))
    # 5 of 160 used by each reply: the estimate falls towards it, and the reservation binds again
    assert booked[-1] == reserved[-1]
    assert engine.output_share.value < 0.1
