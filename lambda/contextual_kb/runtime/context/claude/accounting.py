"""What the model calls of one invocation cost and how they went. Pure; updated by one thread."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from contextual_kb.runtime.context.claude.pricing import Prices, cost_usd

if TYPE_CHECKING:
    from contextual_kb.runtime.context.claude.shared_quota import QuotaCounters


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0  # uncached input only (Anthropic's usage semantics)
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    output_tokens: int = 0


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


@dataclass
class ModelAccounting:
    calls: int = 0  # model requests that ended, successfully or not
    attempts: int = 0  # HTTP attempts, the SDK's retries included
    throttles: int = 0  # 429 answers seen, retried or not
    failed_calls: Counter[str] = field(default_factory=Counter)  # by kind, after the SDK's retries
    requeued_calls: int = 0  # calls put back in the queue after throttling or a transient failure
    input_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    output_tokens: int = 0
    cache_writes: int = 0  # calls whose usage shows a cache write
    latencies: list[float] = field(default_factory=list)  # seconds, successful calls
    chunks_from_model: int = 0
    chunks_remembered: int = 0  # served from the remembered contexts, no call
    contexts_remembered_written: int = 0
    memory_errors: int = 0
    answers_rejected: Counter[str] = field(default_factory=Counter)  # by reason (then the fallback)
    answers_capped: int = 0  # kept, cut to CONTEXT_MAX_CHARS
    grouped_retries: int = 0  # chunks missing from a grouped answer, asked again alone
    grouped_units: int = 0  # CONTEXT_MODE=auto: document units asked in groups (too short to cache)
    fallbacks: Counter[str] = field(default_factory=Counter)  # chunks given the fallback, by reason
    deferred: int = 0  # CONTEXT_DEFER=always: chunks left for `ckb contextualize` (structural for now)
    documents_pending: int = 0  # documents recorded as pending (a record new in the bucket)
    documents_pending_refreshed: int = 0  # records already there (another call of the same document)
    pending_errors: int = 0  # pending records that could not be written (logged)
    windowed_documents: int = 0
    # The quota shared by every invocation (MODEL_QUOTA_TABLE): seconds calls waited for their turns, summed
    # over calls (concurrent calls wait together: it can exceed the invocation's time); turns booked again
    # because another invocation wrote first; bookings the table failed; attempts (retries included) sent
    # without a turn because the table could not be used (degraded: 429s handled as without a shared quota).
    shares_quota: bool = False
    quota_wait_seconds: float = 0.0
    quota_conflicts: int = 0
    quota_table_errors: int = 0
    attempts_without_turns: int = 0
    prices: Prices | None = None
    cache_ttl: str = "5m"

    @property
    def used(self) -> bool:
        """A model strategy did something this invocation (else its figures are left out)."""
        return bool(self.calls or self.chunks_remembered or self.fallbacks or self.deferred)

    @property
    def retries(self) -> int:
        return max(0, self.attempts - self.calls)

    def record_quota(self, counters: QuotaCounters) -> None:
        self.shares_quota = True
        self.quota_wait_seconds += counters.waited
        self.quota_conflicts += counters.conflicts
        self.quota_table_errors += counters.table_errors
        self.attempts_without_turns += counters.without_turns

    def add_usage(self, usage: Usage) -> None:
        self.input_tokens += usage.input_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        self.cache_read_tokens += usage.cache_read_tokens
        self.output_tokens += usage.output_tokens
        self.cache_writes += int(usage.cache_write_tokens > 0)

    def cost(self) -> float | None:
        if self.prices is None:
            return None
        return cost_usd(
            self.prices,
            input_tokens=self.input_tokens,
            cache_write_tokens=self.cache_write_tokens,
            cache_read_tokens=self.cache_read_tokens,
            output_tokens=self.output_tokens,
            ttl=self.cache_ttl,
        )

    def as_log(self) -> dict[str, object]:
        cost = self.cost()
        return {
            "calls": self.calls,
            "attempts": self.attempts,
            "retries": self.retries,
            "throttles": self.throttles,
            "failed_calls": dict(self.failed_calls),
            "requeued_calls": self.requeued_calls,
            "input_tokens": self.input_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "output_tokens": self.output_tokens,
            "cache_writes": self.cache_writes,
            "estimated_cost_usd": None if cost is None else round(cost, 6),
            "latency_p50_ms": round(1000 * percentile(self.latencies, 0.50)),
            "latency_p95_ms": round(1000 * percentile(self.latencies, 0.95)),
            "chunks_from_model": self.chunks_from_model,
            "chunks_remembered": self.chunks_remembered,
            "contexts_remembered_written": self.contexts_remembered_written,
            "memory_errors": self.memory_errors,
            "answers_rejected": dict(self.answers_rejected),
            "answers_capped": self.answers_capped,
            "grouped_retries": self.grouped_retries,
            "grouped_units": self.grouped_units,
            "fallbacks": dict(self.fallbacks),
            "deferred": self.deferred,
            "documents_pending": self.documents_pending,
            "documents_pending_refreshed": self.documents_pending_refreshed,
            "pending_errors": self.pending_errors,
            "windowed_documents": self.windowed_documents,
            "quota_wait_seconds": round(self.quota_wait_seconds, 1),
            "quota_conflicts": self.quota_conflicts,
            "quota_table_errors": self.quota_table_errors,
            "attempts_without_turns": self.attempts_without_turns,
        }
