"""A local stand-in for Bedrock's InvokeModel with Anthropic bodies, for tests, the demo and benchmarks.

Reached through ``ANTHROPIC_BEDROCK_BASE_URL`` (the real ``anthropic[bedrock]`` SDK signs and sends as it
would to AWS). It follows the rules that shape our engine, as the facts file states them:

- latency: a fixed part (time to the first token) plus a part per output token;
- prompt caching: a prefix up to the last ``cache_control`` block is cached if it reaches the model's
  minimum; an entry is readable only once the response that wrote it has started (after the fixed part),
  so parallel first calls on one document all pay the write; entries live ``ttl`` after their last use;
- quotas, as Bedrock counts them (the rules, each with its source and date: local/bedrock_quotas.py):
  tokens and requests per minute per model id as called (``global.``, geographic and in-Region rows apart),
  and tokens per day across models (700M by default); a request reserves input + cache write + max_tokens
  at its start (the cache read too behind ``reserve_cache_reads``) and is refused ``429
  ThrottlingException`` when that exceeds what is left; at its end it settles to input + cache write +
  output x burndown (the model table's), the rest given back. RPM is off unless configured, and ignored
  (one log line) for a model AWS lists without one. The minute is a named choice (``window``): fixed
  wall-clock minutes (the default), a sliding 60 s, or the former per-second bucket of ``burst_seconds``.
  ``/_standin/stats`` carries an ``EstimatedTPMQuotaUsage``-like series: the settled charges of the
  requests completed in each wall-clock minute, per model;
- faults: a share of calls answered 500/503, calls that hang, scripted answers, all counted.

Tokens are estimated as UTF-8 bytes / 3.5. Contexts it writes are made from the document's first line and
the chunk's first words: plausible text of a realistic length, not a model's judgement.

    python -m contextual_kb.local.bedrock_standin --port 8765 --latency-ms 300 --per-token-ms 2 \
        [--tpm 5000000] [--rpm 0] [--tpd 700000000] [--window clock-minute] [--reserve-cache-reads]
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import html
import itertools
import logging
import math
import random
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from contextual_kb.local.bedrock_quotas import (
    DAY,
    DEFAULT_WINDOW,
    MINUTE,
    TOO_MANY_REQUESTS,
    TOO_MANY_TOKENS,
    TOO_MANY_TOKENS_PER_DAY,
    WINDOWS,
    FixedWindow,
    Quota,
    TokenBucket,
    Window,
    reservation,
    settled_charge,
    window_quota,
)
from contextual_kb.local.http_base import HttpError, JsonHandler, parse_json
from contextual_kb.local.loopback import LoopbackServer
from contextual_kb.local.s3server import stop_child
from contextual_kb.runtime.context.claude.pricing import (
    DAILY_TOKENS_DEFAULT,
    max_output_tokens,
    min_cache_tokens,
    output_burndown,
    rpm_listed_none,
)

__all__ = ["WINDOWS", "BedrockStandIn", "StandInConfig", "StandInStats", "TokenBucket", "count_tokens"]
_log = logging.getLogger("contextual-kb.bedrock-standin")

BYTES_PER_TOKEN = 3.5
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
_PATH = re.compile(r"^/model/(?P<model>[^/]+)/invoke$")
_CHUNK = re.compile(r"<chunk>\n?(.*?)\n?</chunk>", re.DOTALL)
_NUMBERS = re.compile(r"^Chunks: ([\d, ]+)\.$", re.MULTILINE)
_MARKER = re.compile(r"⟪chunk (\d+) (?P<code>[0-9a-f]{8})⟫")
_WORD = re.compile(r"\S+")
_SOURCE = re.compile(r'<source n="(?P<n>\d+)"[^>]*>\n(?P<body>.*?)\n</source>', re.DOTALL)


def count_tokens(text: str) -> int:
    # surrogatepass: a lone surrogate (legal in JSON) is carried, as Bedrock carries any text it is sent.
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / BYTES_PER_TOKEN) if text else 0


@dataclass(frozen=True, slots=True)
class Seen:
    """What a scripted responder is shown of a request."""

    model: str
    document: str  # the first content block of the user message
    question: str  # the rest of the user message
    max_tokens: int


@dataclass
class StandInConfig:
    latency_ms: float = 300.0
    per_token_ms: float = 2.0
    # Each model id as called gets its own quotas of these figures (local/bedrock_quotas.py).
    rpm: int = 0  # requests per minute; 0: off (ignored for a model AWS lists without one)
    tpm: int = 0  # tokens per minute, reserved and settled as Bedrock does (module docstring); 0: off
    tpd: int = DAILY_TOKENS_DEFAULT  # tokens per day, one quota across models; 0: off
    window: Window = DEFAULT_WINDOW  # how a minute is counted: clock-minute, sliding-minute or bucket
    burst_seconds: float = 1.0  # the bucket window's capacity, in seconds of quota
    reserve_cache_reads: bool = False  # a cache read is reserved at admission too (then given back)
    # The wall-clock time (seconds) of a request's arrival time (time.monotonic() in the server): the
    # clock-minute window and the day are counted on it. None: the machine's clock.
    wall_clock: Callable[[float], float] | None = None
    # The clock starts at the first request (its minute 0 begins with it), instead: a benchmark's first
    # minute is whole without waiting for the machine's next minute (where a minute starts against a run is
    # chance, on AWS too).
    clock_from_first_request: bool = False
    fault_rate: float = 0.0  # share of calls answered 500/503
    throttle_rate: float = 0.0  # share of calls answered 429 regardless of quota
    hang_rate: float = 0.0  # share of calls that wait ``hang_seconds`` before answering
    hang_seconds: float = 120.0
    min_cache_tokens: int = 0  # 0: the model's documented minimum
    output_burndown: int = 0  # quota tokens an output token keeps; 0: the model table's (pricing.py)
    seed: int = 7
    record: bool = False  # keep every request body (``BedrockStandIn.seen``), for tests
    # Returns the answer text for a request (None: the stand-in's own); for tests of untrusted output.
    responder: Callable[[Seen], str | None] | None = None
    # Returns an HTTP status to fail a request with (None: answer it): faults that belong to a document.
    fault_for: Callable[[Seen], int | None] | None = None


@dataclass
class _Entry:
    readable_at: float
    expires_at: float


@dataclass
class StandInStats:
    requests: int = 0
    answered: int = 0
    throttled: int = 0
    throttled_by_requests: int = 0  # refused by the request quota
    throttled_by_tokens: int = 0  # refused by the token quota (a reservation the bucket did not hold)
    # of those, reservations larger than the window can hold (the bucket: they need it full; a minute
    # window: never let in)
    throttled_over_bucket: int = 0
    throttled_by_day: int = 0  # refused by the daily quota
    faults: int = 0
    hangs: int = 0
    invalid: int = 0
    cache_writes: int = 0
    cache_reads: int = 0
    input_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    output_tokens: int = 0
    quota_tokens: int = 0  # what the token quota kept of the requests let through (after settling)
    reserved_tokens: int = 0  # what it reserved of them at their start
    writes_by_prefix: Counter[str] = field(default_factory=Counter)
    answer_times: list[float] = field(default_factory=list)  # monotonic time of each 200 answer
    # (monotonic time, quota tokens kept) of each request let through, at its arrival
    admitted: list[tuple[float, int]] = field(default_factory=list)
    # EstimatedTPMQuotaUsage as the stand-in sees it: per model id, per wall-clock minute (its start, epoch
    # seconds), the settled charges of the requests completed in it (no reservations, no cache reads)
    estimated_tpm_quota_usage: dict[str, Counter[int]] = field(default_factory=dict)
    rpm_ignored: list[str] = field(default_factory=list)  # models AWS lists without an RPM quota
    window: str = DEFAULT_WINDOW

    first_request_at: float | None = None  # monotonic, this process

    def as_dict(self) -> dict[str, Any]:
        hidden = {"writes_by_prefix", "answer_times", "admitted", "estimated_tpm_quota_usage"}
        out = {k: v for k, v in vars(self).items() if k not in hidden}
        out["estimated_tpm_quota_usage"] = {
            model: sorted(minutes.items()) for model, minutes in self.estimated_tpm_quota_usage.items()
        }
        out["documents_written"] = len(self.writes_by_prefix)
        out["max_writes_per_prefix"] = max(self.writes_by_prefix.values(), default=0)
        out["busy_seconds"] = (
            max(self.answer_times) - self.first_request_at
            if self.answer_times and self.first_request_at is not None
            else 0.0
        )
        out["quota_requests_by_second"] = self._by_second(lambda tokens: 1)
        out["quota_tokens_by_second"] = self._by_second(lambda tokens: tokens)
        return out

    def _by_second(self, weight: Callable[[int], int]) -> list[int]:
        """Requests or quota tokens let through in each second since the first request: which quota bound
        when, and where it went unused."""
        if self.first_request_at is None:
            return []
        seconds: list[int] = []
        for at, tokens in self.admitted:
            second = int(at - self.first_request_at)
            seconds.extend([0] * (second + 1 - len(seconds)))
            seconds[second] += weight(tokens)
        return seconds


class BedrockStandIn:
    def __init__(self, config: StandInConfig | None = None) -> None:
        self.config = config or StandInConfig()
        self.stats = StandInStats()
        self._lock = threading.Lock()
        self._cache: dict[str, _Entry] = {}
        self._random = random.Random(self.config.seed)
        self._offset = time.time() - time.monotonic()
        self._quotas: dict[str, tuple[Quota | None, Quota | None]] = {}  # model id -> (RPM, TPM)
        self._day: Quota | None = None
        self._reset_quotas()
        # (when a request ends, order, [(quota, ticket)], reserved, kept): a heap
        self._settlements: list[tuple[float, int, list[tuple[Quota, object]], int, int]] = []
        self._order = itertools.count()
        self._scripted: list[int] = []  # statuses to answer next, in order
        self.seen: list[dict[str, Any]] = []  # request bodies, when ``config.record``
        self._server: LoopbackServer | None = None

    # --- control (tests) ---
    def configure(self, **changes: Any) -> None:
        """Change the configuration while running (quotas start full again)."""
        with self._lock:
            for name, value in changes.items():
                if not hasattr(self.config, name):
                    raise AttributeError(f"StandInConfig has no {name}")
                setattr(self.config, name, value)
            self._reset_quotas()
            self._settlements.clear()

    def _reset_quotas(self) -> None:
        config = self.config
        if config.window not in WINDOWS:
            raise ValueError(f"window {config.window!r}: one of {', '.join(WINDOWS)}")
        negative = [name for name in ("rpm", "tpm", "tpd") if getattr(config, name) < 0]
        if negative or not config.burst_seconds > 0:
            raise ValueError(
                f"{', '.join(negative) or 'burst_seconds'}: 0 (off) or more; burst_seconds over 0"
            )
        self.stats.window = config.window
        self._quotas.clear()
        self._day = FixedWindow(config.tpd, DAY, self._wall) if config.tpd else None

    def _wall(self, at: float) -> float:
        clock = self.config.wall_clock
        if clock is not None:
            return clock(at)
        first = self.stats.first_request_at
        if self.config.clock_from_first_request and first is not None:
            return at - first
        return at + self._offset

    def _model_quotas(self, model: str) -> tuple[Quota | None, Quota | None]:
        """The model id's own RPM and TPM (scope included: a global. and a us. profile of one model are
        two rows). Under the lock."""
        found = self._quotas.get(model)
        if found is None:
            config = self.config
            rpm = config.rpm
            if rpm and rpm_listed_none(model):
                rpm = 0
                self.stats.rpm_ignored.append(model)
                _log.warning(
                    "stand-in: RPM %s ignored for %s: AWS lists no requests-per-minute quota for it",
                    config.rpm,
                    model,
                )

            def make(per_minute: int) -> Quota | None:
                if not per_minute:
                    return None
                burst = config.burst_seconds
                return window_quota(config.window, per_minute, burst_seconds=burst, wall=self._wall)

            found = self._quotas[model] = (make(rpm), make(config.tpm))
        return found

    def fail_next(self, count: int, status: int = 500) -> None:
        with self._lock:
            self._scripted.extend([status] * count)

    def expire_cache(self) -> None:
        with self._lock:
            self._cache.clear()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("stand-in not started")
        return self._server.url

    def start(self, port: int = 0) -> BedrockStandIn:
        standin = self

        class Handler(_Handler):
            owner = standin

        self._server = LoopbackServer(Handler, port=port, name="bedrock-standin")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    # --- the model ---
    def answer(self, model: str, body: dict[str, Any], arrived: float) -> tuple[int, dict[str, Any], float]:
        """(status, JSON body, seconds to wait before answering)."""
        config = self.config
        try:
            blocks, system_text, max_tokens = _read_body(body, model)
        except ValueError as exc:
            with self._lock:
                self.stats.requests += 1
                self.stats.invalid += 1
            return 400, _error("ValidationException", str(exc)), 0.0
        if config.record:
            with self._lock:
                self.seen.append(body)
        texts = [system_text, *(b.get("text", "") for b in blocks)]
        total_tokens = sum(count_tokens(t) for t in texts)
        document = blocks[0].get("text", "") if blocks else ""
        question = "\n".join(b.get("text", "") for b in blocks[1:])
        seen = Seen(model, document, question, max_tokens)
        status = config.fault_for(seen) if config.fault_for is not None else None
        if status is not None:
            with self._lock:
                self.stats.requests += 1
                self.stats.faults += 1
            return (
                status,
                _error(_ERROR_TYPES.get(status, "InternalServerException"), "this request fails"),
                0.0,
            )
        with self._lock:
            self.stats.requests += 1
            if self.stats.first_request_at is None:
                self.stats.first_request_at = arrived
            cache_write, cache_read, prefix_key, commit = self._cache_use(model, system_text, blocks, arrived)
            uncached = total_tokens - cache_write - cache_read
            reserved = reservation(
                uncached=uncached,
                cache_write=cache_write,
                cache_read=cache_read,
                max_tokens=max_tokens,
                cache_reads=config.reserve_cache_reads,
            )
            refused, tickets = self._admission(model, reserved, arrived)
            if refused is not None:
                return refused
            commit()
            hang = self._random.random() < config.hang_rate
            if hang:
                self.stats.hangs += 1
        text, output_tokens, stop_reason = self._text(seen)
        self._count(uncached, cache_write, cache_read, output_tokens, prefix_key)
        delay = (
            config.hang_seconds if hang else (config.latency_ms + config.per_token_ms * output_tokens) / 1000
        )
        kept = settled_charge(
            uncached=uncached,
            cache_write=cache_write,
            output=output_tokens,
            burndown=output_burndown(model, config.output_burndown),
        )
        self._settle(model, arrived, tickets, reserved, kept, arrived + delay)
        reply = {
            "id": "msg_standin_" + hashlib.sha256(f"{arrived}{prefix_key}".encode()).hexdigest()[:20],
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {
                "input_tokens": uncached,
                "cache_creation_input_tokens": cache_write,
                "cache_read_input_tokens": cache_read,
                "output_tokens": output_tokens,
            },
        }
        return 200, reply, delay

    def _text(self, seen: Seen) -> tuple[str, int, str]:
        """(the answer, its output tokens, its stop reason), cut at ``max_tokens``."""
        text = self.config.responder(seen) if self.config.responder is not None else None
        if text is None:
            # ckb ask's prompt: its sources, each a block of its own, then the <question> block; a document
            # to contextualize opens with <document>.
            document, question = seen.document, seen.question
            asked = document.startswith('<source n="') and "<question>" in question
            text = _answer(f"{document}\n{question}") if asked else _contexts(document, question)
        output_tokens = count_tokens(text)
        if output_tokens <= seen.max_tokens:
            return text, output_tokens, "end_turn"
        cut = text.encode("utf-8", "surrogatepass")[: int(seen.max_tokens * BYTES_PER_TOKEN)]
        return cut.decode("utf-8", errors="ignore"), seen.max_tokens, "max_tokens"

    def _count(self, uncached: int, cache_write: int, cache_read: int, output: int, prefix_key: str) -> None:
        with self._lock:
            self.stats.answered += 1
            self.stats.input_tokens += uncached
            self.stats.cache_write_tokens += cache_write
            self.stats.cache_read_tokens += cache_read
            self.stats.output_tokens += output
            if cache_write:
                self.stats.cache_writes += 1
                self.stats.writes_by_prefix[prefix_key] += 1
            if cache_read:
                self.stats.cache_reads += 1

    def _settle(
        self,
        model: str,
        arrived: float,
        tickets: list[tuple[Quota, object]],
        reserved: int,
        kept: int,
        ends: float,
    ) -> None:
        """The request let in at ``arrived`` settles to ``kept`` of the ``reserved`` tokens when it ends (the
        next request from then on finds the difference), charged to the minute it completes in."""
        with self._lock:
            self.stats.quota_tokens += kept
            self.stats.reserved_tokens += reserved
            self.stats.admitted.append((arrived, kept))
            minute = int(math.floor(self._wall(ends) / MINUTE) * MINUTE)
            self.stats.estimated_tpm_quota_usage.setdefault(model, Counter())[minute] += kept
            if tickets:
                heapq.heappush(self._settlements, (ends, next(self._order), tickets, reserved, kept))

    def _settled(self, now: float) -> None:
        """Requests ended by ``now`` settle, in the order they ended. Under the lock."""
        while self._settlements and self._settlements[0][0] <= now:
            ends, _, tickets, reserved, kept = heapq.heappop(self._settlements)
            for quota, ticket in tickets:
                quota.settle(ticket, reserved, kept, ends)

    def _admission(
        self, model: str, tokens: int, now: float
    ) -> tuple[tuple[int, dict[str, Any], float] | None, list[tuple[Quota, object]]]:
        """(a scripted or injected fault, or a throttle, or None to answer; the token quotas' tickets to
        settle). Called under the lock."""
        config = self.config
        self._settled(now)
        if self._scripted:
            status = self._scripted.pop(0)
            self.stats.faults += 1
            kind = _ERROR_TYPES.get(status, "InternalServerException")
            return (status, _error(kind, "scripted"), 0.0), []
        if self._random.random() < config.fault_rate:
            self.stats.faults += 1
            status = 500 if self._random.random() < 0.5 else 503
            return (status, _error(_ERROR_TYPES[status], "injected fault"), 0.0), []
        message = TOO_MANY_REQUESTS if self._random.random() < config.throttle_rate else ""
        rpm, tpm = self._model_quotas(model)
        # A request refused by any quota counts against none.
        if not message and rpm is not None and not rpm.allows(1, now):
            message = TOO_MANY_REQUESTS
            self.stats.throttled_by_requests += 1
        if not message and tpm is not None and not tpm.allows(tokens, now):
            message = TOO_MANY_TOKENS
            self.stats.throttled_by_tokens += 1
            self.stats.throttled_over_bucket += int(tokens > tpm.capacity)
        if not message and self._day is not None and not self._day.allows(tokens, now):
            message = TOO_MANY_TOKENS_PER_DAY
            self.stats.throttled_by_day += 1
        if message:
            self.stats.throttled += 1
            return (429, _error("ThrottlingException", message), 0.0), []
        if rpm is not None:
            rpm.take(1, now)
        tickets = [(quota, quota.take(tokens, now)) for quota in (tpm, self._day) if quota is not None]
        return None, tickets

    def _prefix(
        self, model: str, system_text: str, blocks: list[dict[str, Any]]
    ) -> tuple[int, str, float] | None:
        """The cacheable prefix's (tokens, key, TTL seconds), or None when nothing is cacheable."""
        marked = [i for i, b in enumerate(blocks) if isinstance(b.get("cache_control"), dict)]
        if not marked:
            return None
        last = marked[-1]
        prefix = [system_text, *(b.get("text", "") for b in blocks[: last + 1])]
        tokens = sum(count_tokens(t) for t in prefix)
        if tokens < min_cache_tokens(model, self.config.min_cache_tokens):
            return None
        key = hashlib.sha256("\x00".join([model, *prefix]).encode("utf-8", "surrogatepass")).hexdigest()
        return tokens, key, TTL_SECONDS.get(str(blocks[last]["cache_control"].get("ttl", "5m")), 300.0)

    def _cache_use(
        self, model: str, system_text: str, blocks: list[dict[str, Any]], now: float
    ) -> tuple[int, int, str, Callable[[], None]]:
        """(tokens written, tokens read, prefix key, what to call once the request is let in: a throttled
        one neither writes nor refreshes the cache); called under the lock."""
        found = self._prefix(model, system_text, blocks)
        if found is None:
            return 0, 0, "", lambda: None
        tokens, key, ttl = found
        entry = self._cache.get(key)
        if entry is not None and entry.readable_at <= now < entry.expires_at:

            def refresh() -> None:
                entry.expires_at = now + ttl  # a hit refreshes the entry

            return 0, tokens, key, refresh
        readable_at = now + self.config.latency_ms / 1000  # once this response starts

        def write() -> None:
            self._cache[key] = _Entry(readable_at, readable_at + ttl)

        return tokens, 0, key, write


_ERROR_TYPES = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"__type": kind, "message": message}


def _read_body(body: Any, model: str) -> tuple[list[dict[str, Any]], str, int]:
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    if body.get("anthropic_version") != "bedrock-2023-05-31":
        raise ValueError("anthropic_version must be bedrock-2023-05-31")
    max_tokens = body.get("max_tokens")
    # Required in an InvokeModel Anthropic body (local/bedrock_quotas.py): never the model's maximum.
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise ValueError("max_tokens: a positive integer is required")
    if max_tokens > (most := max_output_tokens(model)):
        limit = f"{most}, which is the maximum allowed number of output tokens for {model}"
        raise ValueError(f"max_tokens: {max_tokens} > {limit}")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages: a non-empty list is required")
    blocks: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            blocks.append({"type": "text", "text": content})
        elif isinstance(content, list):
            blocks.extend(b for b in content if isinstance(b, dict))
        else:
            raise ValueError("messages[].content: a string or a list of blocks is required")
    system = body.get("system", "")
    if isinstance(system, list):
        system = "\n".join(b.get("text", "") for b in system if isinstance(b, dict))
    return blocks, str(system), max_tokens


def _title(document: str) -> str:
    body = document.removeprefix("<document>").strip()
    body = _MARKER.sub("", body)
    for raw in body.splitlines():
        line = raw.strip(" #/*-=\"'`\t")
        if len(line) > 3:
            return _cut(line, 100).rstrip(".:;,")
    return "an untitled document"


def _summary(chunk: str) -> str:
    """The chunk's first words, without the closing punctuation of its own (the sentence adds a full stop)."""
    words = _WORD.findall(_MARKER.sub("", chunk))[:24]
    return _cut(" ".join(words), 200).rstrip(" .!?;:,") or "nothing readable"


def _cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, cut at a space (a word is never cut in two) and marked "…"."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    return (head[:space] if space > 0 else head).rstrip(" .!?;:,") + "…"


def _contexts(document: str, question: str) -> str:
    title = _title(document)
    numbers = _NUMBERS.search(question)
    if numbers and '<context chunk="N">' in question:
        wanted = [int(n) for n in re.findall(r"\d+", numbers.group(1))]
        # Only the markers with the code the question names are ours (a document may hold look-alikes).
        code = re.search(r"⟪chunk N ([0-9a-f]{8})⟫", question)
        ours = [m for m in _MARKER.finditer(document) if code and m.group("code") == code.group(1)]
        starts = {int(m.group(1)): m.end() for m in ours}
        lines = []
        for n in wanted:
            if n not in starts:
                continue
            following = next((m.start() for m in ours if m.start() >= starts[n]), len(document))
            chunk = document[starts[n] : following]
            lines.append(
                f'<context chunk="{n}">This chunk is from {title}. It covers: {_summary(chunk)}.</context>'
            )
        return "\n".join(lines)
    match = _CHUNK.search(question)
    chunk = match.group(1) if match else question
    return f"This chunk is from {title}. It covers: {_summary(chunk)}."


def _answer(prompt: str) -> str:
    """``ckb ask``'s prompt (numbered sources, then the question): an answer citing the first source, made
    by rule and saying so, so the plumbing (sources in, citations out) shows without a model."""
    first = _SOURCE.search(prompt)
    assert first is not None
    # The source is its context, then its chunk's text, XML-escaped: quote the chunk's first words.
    chunk = re.search(r"<text>(.*?)</text>", first.group("body"), re.DOTALL)
    words = _WORD.findall(html.unescape(chunk.group(1) if chunk else first.group("body")))[:30]
    return (
        "(An answer by the Bedrock stand-in's rule, not a model's.) The most relevant source says: "
        f'"{_cut(" ".join(words), 240)}" [{first.group("n")}]'
    )


class _Handler(JsonHandler):
    owner: BedrockStandIn
    server_name = "bedrock-runtime"

    def answer(self, method: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        if method == "GET":
            if self.path == "/_standin/stats":
                return 200, self.owner.stats.as_dict()
            raise HttpError(404, "UnknownOperationException", self.path)
        arrived = self.arrived
        match = _PATH.match(self.path.split("?")[0])
        if method != "POST" or not match:
            raise HttpError(404, "UnknownOperationException", f"no operation at {self.path}")
        auth = self.headers.get("Authorization", "")
        if not auth.startswith(("AWS4-HMAC-SHA256 ", "Bearer ")):
            raise HttpError(403, "AccessDeniedException", "missing authentication")
        body = parse_json(raw)
        status, reply, delay = self.owner.answer(unquote(match.group("model")), body, arrived)
        wait = arrived + delay - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        if status == 200:
            with self.owner._lock:
                self.owner.stats.answer_times.append(time.monotonic())
        return status, reply


@contextmanager
def running_standin(config: StandInConfig | None = None) -> Iterator[BedrockStandIn]:
    standin = BedrockStandIn(config).start()
    try:
        yield standin
    finally:
        standin.stop()


@contextmanager
def standin_subprocess(
    latency_ms: float,
    per_token_ms: float,
    rpm: int = 0,
    tpm: int = 0,
    throttle_rate: float = 0.0,
    output_burndown: int = 0,
    burst_seconds: float = 1.0,
    window: Window = DEFAULT_WINDOW,
    tpd: int = DAILY_TOKENS_DEFAULT,
    reserve_cache_reads: bool = False,
    clock_from_first_request: bool = False,
) -> Iterator[str]:
    """The stand-in in a child process on 127.0.0.1 (its memory and threads apart from the caller's); yields
    its URL and stops it afterwards."""
    command = [
        sys.executable, "-m", "contextual_kb.local.bedrock_standin", "--port", "0",
        "--latency-ms", str(latency_ms), "--per-token-ms", str(per_token_ms), "--rpm", str(rpm),
        "--tpm", str(tpm), "--throttle-rate", str(throttle_rate), "--output-burndown", str(output_burndown),
        "--burst-seconds", str(burst_seconds), "--window", window, "--tpd", str(tpd),
        *(["--reserve-cache-reads"] if reserve_cache_reads else []),
        *(["--clock-from-first-request"] if clock_from_first_request else []),
        "--until-stdin-closes",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # main()'s "Bedrock stand-in at http://127.0.0.1:PORT; ..."
        if "stand-in at " not in line:
            raise RuntimeError(f"the stand-in did not start: {line!r}")
        yield line.split("stand-in at ", 1)[1].split(";", 1)[0]
    finally:
        stop_child(process)


def main() -> None:
    parser = argparse.ArgumentParser(description="A local Bedrock InvokeModel stand-in for Anthropic bodies.")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--latency-ms", type=float, default=300.0)
    parser.add_argument("--per-token-ms", type=float, default=2.0)
    parser.add_argument("--rpm", type=int, default=0, help="requests per minute, per model id; 0: off")
    parser.add_argument("--tpm", type=int, default=0, help="tokens per minute, per model id; 0: off")
    parser.add_argument(
        "--tpd", type=int, default=DAILY_TOKENS_DEFAULT, help="tokens per day across models; 0: off"
    )
    parser.add_argument(
        "--window",
        choices=WINDOWS,
        default=DEFAULT_WINDOW,
        help="how a minute is counted (AWS does not document it): fixed wall-clock minutes, the last 60 s, "
        "or a per-second token bucket of --burst-seconds",
    )
    parser.add_argument("--burst-seconds", type=float, default=1.0, help="the bucket window's capacity")
    parser.add_argument(
        "--reserve-cache-reads",
        action="store_true",
        help="reserve a cache read at admission (then give it back)",
    )
    parser.add_argument(
        "--clock-from-first-request",
        action="store_true",
        help="minute 0 (and day 0) begin with the first request, not the machine's clock",
    )
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--throttle-rate", type=float, default=0.0, help="share of calls answered 429")
    parser.add_argument(
        "--output-burndown", type=int, default=0, help="quota tokens an output token keeps (0: the model's)"
    )
    parser.add_argument(
        "--until-stdin-closes", action="store_true", help="stop when standard input closes (a parent's pipe)"
    )
    args = parser.parse_args()
    if min(args.rpm, args.tpm, args.tpd) < 0 or args.burst_seconds <= 0:
        parser.error("--rpm, --tpm and --tpd are 0 (off) or more; --burst-seconds is over 0")
    config = StandInConfig(
        latency_ms=args.latency_ms,
        per_token_ms=args.per_token_ms,
        rpm=args.rpm,
        tpm=args.tpm,
        tpd=args.tpd,
        window=args.window,
        burst_seconds=args.burst_seconds,
        reserve_cache_reads=args.reserve_cache_reads,
        clock_from_first_request=args.clock_from_first_request,
        fault_rate=args.fault_rate,
        throttle_rate=args.throttle_rate,
        output_burndown=args.output_burndown,
    )
    standin = BedrockStandIn(config).start(args.port)
    print(f"Bedrock stand-in at {standin.url}; export ANTHROPIC_BEDROCK_BASE_URL={standin.url}", flush=True)
    try:
        if args.until_stdin_closes:
            sys.stdin.read()  # returns at EOF: the parent closed the pipe or died
        else:
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        standin.stop()


if __name__ == "__main__":
    main()
