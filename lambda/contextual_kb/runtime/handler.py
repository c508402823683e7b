"""Lambda entry point for the Knowledge Base's POST_CHUNKING custom transformation.

What every invocation needs (settings, the strategy with its model client and SDK imports, the S3 clients)
is built when Lambda imports this module: its init phase pays for it (and SnapStart or provisioned
concurrency, where a user enables them), not the first invocation. A settings error there is kept for the
invocation, which fails with its one-line message and the KB's keys in the log.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from contextual_kb.runtime.context import ContextStrategy, build_strategy
from contextual_kb.runtime.context.claude.accounting import ModelAccounting, percentile
from contextual_kb.runtime.context.structural import DOCUMENT_LEVEL
from contextual_kb.runtime.deadline import Deadline
from contextual_kb.runtime.errors import TransformationError
from contextual_kb.runtime.models import parse_event
from contextual_kb.runtime.observability import SERVICE, bind_event_keys, logger, metrics, tracer
from contextual_kb.runtime.settings import Settings
from contextual_kb.runtime.storage import S3BatchStore
from contextual_kb.runtime.transform import RunStats, Steps, Transformation

LambdaHandler = Callable[[dict[str, Any], LambdaContext], dict[str, Any]]


@functools.cache
def runtime() -> tuple[Settings, ContextStrategy, S3BatchStore]:
    """Settings, strategy and S3 client, built once per execution environment (``cache_clear`` resets)."""
    settings = Settings.from_env()
    # Connections for the parallel reads and writes, and the claude strategy's remembered-context lookups.
    store = S3BatchStore(max_attempts=settings.s3_max_attempts, connections=settings.s3_max_concurrency + 4)
    return settings, build_strategy(settings), store


def _initialise() -> None:
    """In Lambda (not when a test or the CLI imports this module), build the runtime at import."""
    if not os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
        return
    # A settings error is not cached: the first invocation builds it again, fails, and logs why.
    with contextlib.suppress(TransformationError):
        runtime()


_initialise()


def make_handler(steps: Steps | None = None) -> LambdaHandler:
    """A Lambda handler running the transformation, with ``steps`` (the user's, ``runtime.sdk``) around the
    context step. The repository's own function is ``make_handler()``: one implementation for both."""

    @logger.inject_lambda_context(clear_state=True)
    @metrics.log_metrics(capture_cold_start_metric=True)
    @tracer.capture_lambda_handler(capture_response=False)
    def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        # With POWERTOOLS_METRICS_DISABLED, Powertools never clears what was added: a warm environment would
        # carry the last invocation's metrics and dimensions over (and print them anyway once a metric has
        # 100 values).
        metrics.clear_metrics()
        bind_event_keys(event)
        try:
            settings, strategy, store = runtime()
            deadline = Deadline.from_remaining(
                context.get_remaining_time_in_millis() / 1000,
                reserve_seconds=settings.deadline_reserve_seconds,
            )
            response, stats = Transformation(settings, strategy, store, steps).run(
                parse_event(event), deadline
            )
        except TransformationError:
            metrics.add_metric(name="TransformationErrors", unit=MetricUnit.Count, value=1)
            logger.exception(
                "transformation failed; the Knowledge Base is expected to mark the file(s) as failed"
            )
            raise
        record(strategy.name, stats, steps=steps is not None)
        return response.dump()

    return lambda_handler


lambda_handler = make_handler()


def record(strategy: str, stats: RunStats, *, steps: bool = False) -> None:
    metrics.add_dimension(name="Strategy", value=strategy)
    # Each function's own series too (a second dimension set of the same values): the alarms of one
    # deployment watch its function, not every function of the account and region emitting the same names;
    # {Strategy, service} stays for what reads it (ckb doctor, dashboards made before).
    function = os.environ.get("AWS_LAMBDA_FUNCTION_NAME")
    if function and hasattr(metrics, "add_dimensions"):  # Powertools 3.x with dimension sets
        metrics.add_dimensions(Strategy=strategy, service=SERVICE, FunctionName=function)
    _counts(
        ("Files", stats.files),
        ("BatchesIn", stats.batches_in),
        ("ChunksIn", stats.chunks_in),
        ("ChunksOut", stats.chunks_out),
        ("ChunksContextualized", stats.chunks_contextualized),
        ("ChunksPassedThrough", stats.chunks_passed_through),
        ("NonTextItems", stats.non_text_items),
        ("EmptyDocuments", stats.empty_documents),
        ("DocumentsChunked", stats.documents_chunked),
        # Documents chunked with no time left to read their outline: by paragraphs, not by sections.
        ("ChunkedWithoutOutline", stats.chunked_without_outline),
        ("ContextMetadataTruncated", stats.metadata_truncated),
        ("ContextErrors", stats.context_errors),
        # Chunks given the document-level context: no time was left to outline their document.
        ("ContextsDocumentLevel", stats.contexts_by_source.get(DOCUMENT_LEVEL, 0)),
    )
    if steps:  # the user's steps (runtime.sdk): what they dropped and rewrote, and what did not fit
        _counts(
            ("ChunksDropped", stats.chunks_dropped),
            ("ChunksRewritten", stats.chunks_rewritten),
            ("StepMetadataLeftOut", stats.step_metadata_left_out),
        )
    if stats.model.used:
        record_model(stats.model)
    logger.info("transformation complete", extra={"strategy": strategy, **stats.as_log()})


def record_model(model: ModelAccounting) -> None:
    """The model's accounting as metrics (the summary log line carries the same figures)."""
    _counts(
        ("ModelCalls", model.calls),
        ("ModelRetries", model.retries),
        ("ModelThrottles", model.throttles),
        ("ModelFailedCalls", sum(model.failed_calls.values())),
        ("InputTokens", model.input_tokens),
        ("CacheWriteTokens", model.cache_write_tokens),
        ("CacheReadTokens", model.cache_read_tokens),
        ("OutputTokens", model.output_tokens),
        ("CacheWrites", model.cache_writes),
        ("ChunksRemembered", model.chunks_remembered),
        ("AnswersRejected", sum(model.answers_rejected.values())),
        ("AnswersCapped", model.answers_capped),
        ("ContextFallbacks", sum(model.fallbacks.values())),
        # CONTEXT_DEFER: chunks left for `ckb contextualize`, and the documents recorded for it.
        ("ChunksDeferred", model.deferred),
        ("DocumentsPending", model.documents_pending),
        ("PendingRecordErrors", model.pending_errors),
        *((f"Fallback_{reason}", count) for reason, count in model.fallbacks.items()),
    )
    if model.latencies:
        metrics.add_metric(name="ModelLatencyP50", unit=MetricUnit.Milliseconds, value=_ms(model, 0.5))
        metrics.add_metric(name="ModelLatencyP95", unit=MetricUnit.Milliseconds, value=_ms(model, 0.95))
    if model.shares_quota:
        wait = round(model.quota_wait_seconds, 1)
        metrics.add_metric(name="QuotaWaitSeconds", unit=MetricUnit.Seconds, value=wait)
        # seconds of the quota booked (what Bedrock reserves) and given back by replies (the cache reads and
        # unused max_tokens): their difference is what the quota kept of this invocation's calls
        for name, seconds in (
            ("QuotaBookedSeconds", model.quota_booked_seconds),
            ("QuotaGivenBackSeconds", model.quota_given_back_seconds),
        ):
            metrics.add_metric(name=name, unit=MetricUnit.Seconds, value=round(seconds, 3))
        # degraded: the quota table could not be used, and attempts went without turns; a timeline end
        # further ahead than any fleet books (a clock ahead) was reset
        _counts(
            ("AttemptsWithoutQuotaTurns", model.attempts_without_turns),
            ("QuotaResets", model.quota_resets),
        )
    cost = model.cost()
    if cost is not None:
        metrics.add_metric(name="EstimatedCostMicroUSD", unit=MetricUnit.Count, value=round(cost * 1e6))


def _counts(*pairs: tuple[str, int]) -> None:
    for name, value in pairs:
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


def _ms(model: ModelAccounting, share: float) -> float:
    return round(1000 * percentile(model.latencies, share))
