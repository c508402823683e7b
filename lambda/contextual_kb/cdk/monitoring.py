"""A dashboard and alarms: the function's errors, duration near its timeout, throttles, and our own metrics
(chunks given the fallback context, model throttles; with a shared model quota, attempts sent without
turns; with the Knowledge Base's ingestion logs, documents that failed); Bedrock's estimate of the model's
tokens-per-minute quota used, beside the quota, and an alarm when it stays near it. Every alarm notifies
the alarm topic when it fires and when it clears, and its description links to its runbook entry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from constructs import Construct

from contextual_kb.cdk.function import NAMESPACE, SERVICE
from contextual_kb.query.ingestion_logs import failed_documents_query
from contextual_kb.runtime.context.claude.pricing import default_tpm, profile_scope

if TYPE_CHECKING:
    from contextual_kb.cdk.ingestion_logs import IngestionLogs

# Each alarm's entry in the runbook is the page's heading "Alarm: <its id>", whose anchor is alarm-<its id>.
RUNBOOK_PAGE = "docs/OPERATIONS.md"


def runbook(alarm_id: str) -> str:
    return f"{RUNBOOK_PAGE}#alarm-{alarm_id.lower()}"


# Bedrock's EstimatedTPMQuotaUsage (AWS/Bedrock, since March 2026): what completed calls settle against the
# model's tokens-per-minute quota (input + cache write + output x burndown; cache reads not counted), a
# 1-minute series per ModelId, which is the id called (the inference profile's for cross-Region calls).
# AWS: "an approximation [that] does not reflect the reservation-based token consumption that drives
# throttling decisions" (monitoring-runtime-metrics.html): admission reserves input + max_tokens first.
BEDROCK_NAMESPACE = "AWS/Bedrock"
QUOTA_USAGE_METRIC = "EstimatedTPMQuotaUsage"
# The alarm: 80% of the quota in each of 5 minutes in a row. Under the quota, because the metric is settled
# usage and Bedrock admits on reservations (a call's max_tokens, perhaps its cache reads); 5 minutes,
# because a sync's first minute (every document's cache write) may spike and pass, while a sync held at the
# quota stays there. No data (no completed call) is not breaching.
QUOTA_ALARM_SHARE = 0.8
QUOTA_ALARM_MINUTES = 5


def quota_usage(model_id: str) -> cw.Metric:
    """Bedrock's EstimatedTPMQuotaUsage for ``model_id`` (a model or inference profile id), summed a minute:
    tokens a minute of the quota, from every caller of that id in the account and Region."""
    return cw.Metric(
        namespace=BEDROCK_NAMESPACE,
        metric_name=QUOTA_USAGE_METRIC,
        dimensions_map={"ModelId": model_id},
        statistic="Sum",
        period=Duration.minutes(1),
    )


def token_quota(model_id: str, tokens_per_minute: int | None = None) -> tuple[int | None, str]:
    """The tokens-per-minute quota the dashboard sets the usage against, and what it is: the one given
    (modelTokensPerMinute: what ingestion may use), else the default AWS lists for the model at its profile
    scope (the account's may be lower or raised: ``ckb doctor`` reads it), else none known."""
    if tokens_per_minute:
        return tokens_per_minute, "modelTokensPerMinute"
    listed = default_tpm(model_id)
    if listed:
        return listed, f"listed default, {profile_scope(model_id)}"
    return None, ""


def function_metric(
    function: lambda_.IFunction, name: str, *, namespace: str = NAMESPACE, service: str = SERVICE
) -> cw.Metric:
    """A metric the function emits (runtime/handler.py): its namespace and service as its environment sets
    them, its own series (the FunctionName dimension), the Claude strategy's."""
    return cw.Metric(
        namespace=namespace,
        metric_name=name,
        dimensions_map={"Strategy": "claude", "service": service, "FunctionName": function.function_name},
        statistic="Sum",
        period=Duration.minutes(5),
    )


class Monitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        function: lambda_.Function,
        timeout_seconds: int,
        topic: sns.ITopic,
        shares_quota: bool = False,
        ingestion: IngestionLogs | None = None,
        namespace: str = NAMESPACE,
        service: str = SERVICE,
        model_id: str | None = None,
        tokens_per_minute: int | None = None,
    ) -> None:
        """``namespace``, ``service``: the function's POWERTOOLS_METRICS_NAMESPACE and
        POWERTOOLS_SERVICE_NAME (the alarms watch what it emits). ``model_id``: the model the function
        calls (MODEL_ID), whose quota usage is graphed; ``tokens_per_minute``: the quota to set it against
        and alarm near (unset: the default AWS lists for the model and scope; none known: no alarm)."""
        super().__init__(scope, construct_id)

        def _ours(name: str) -> cw.Metric:
            return function_metric(function, name, namespace=namespace, service=service)

        errors = function.metric_errors(period=Duration.minutes(5), statistic="Sum")
        duration = function.metric_duration(period=Duration.minutes(5), statistic="Maximum")
        throttles = function.metric_throttles(period=Duration.minutes(5), statistic="Sum")
        fallbacks, model_throttles = _ours("ContextFallbacks"), _ours("ModelThrottles")

        def alarm(alarm_id: str, metric: cw.IMetric, threshold: float, description: str) -> cw.Alarm:
            return cw.Alarm(
                self,
                alarm_id,
                metric=metric,
                threshold=threshold,
                evaluation_periods=1,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
                alarm_description=f"{description} Runbook: {runbook(alarm_id)}",
            )

        self.alarms = [
            alarm("Errors", errors, 1, "The transformation failed: the KB marks those files failed."),
            alarm("DurationNearTimeout", duration, 0.9 * timeout_seconds * 1000,
                  "An invocation used over 90% of the timeout: chunks may fall back."),
            alarm("Throttles", throttles, 1, "Lambda throttled the function."),
            alarm("Fallbacks", fallbacks, 1, "Chunks got the structural context, not Claude's (Fallback_*)."),
            alarm("ModelThrottles", model_throttles, 100,
                  "Bedrock throttled many model calls: consider a quota increase."),
        ]  # fmt: skip
        quota: list[cw.IWidget] = []
        if shares_quota:  # the quota's table could not be used: calls went without turns (OPERATIONS.md)
            without_turns = _ours("AttemptsWithoutQuotaTurns")
            waits = _ours("QuotaWaitSeconds")
            # seconds of the quota booked (what Bedrock reserves) and given back by replies: their
            # difference is what it kept; a reset is a timeline end a clock ahead had pushed out of reach
            booked, given_back = _ours("QuotaBookedSeconds"), _ours("QuotaGivenBackSeconds")
            quota = [
                cw.GraphWidget(
                    title="Shared model quota",
                    left=[without_turns, _ours("QuotaResets")],
                    right=[waits, booked, given_back],
                )
            ]
            self.alarms.append(
                alarm(
                    "AttemptsWithoutQuotaTurns",
                    without_turns,
                    1,
                    "The shared quota's table could not be used (deleted, denied, slow): model calls went "
                    "without turns. The function's log says why.",
                )
            )
        usage: list[cw.IWidget] = []
        if model_id:
            usage = [self._quota_usage(model_id, tokens_per_minute)]
        documents: list[cw.IWidget] = []
        if ingestion is not None:  # the Knowledge Base's own logs: documents an ingestion job failed
            self.alarms.append(
                alarm(
                    "IngestionDocumentsFailed",
                    ingestion.failed_documents,
                    1,
                    "An ingestion job failed documents (the Knowledge Base's own logs, FAILED).",
                )
            )
            documents = [
                cw.GraphWidget(
                    title="Documents failed (Knowledge Base logs)", left=[ingestion.failed_documents]
                ),
                cw.LogQueryWidget(
                    title="Failed documents and their reasons",
                    log_group_names=[ingestion.log_group_name],
                    query_string=failed_documents_query(),
                    width=24,
                ),
            ]
        for each in self.alarms:  # someone hears it fire, and clear
            each.add_alarm_action(actions.SnsAction(topic))
            each.add_ok_action(actions.SnsAction(topic))
        self.dashboard = cw.Dashboard(self, "Dashboard")
        self.dashboard.add_widgets(
            cw.GraphWidget(title="Function", left=[errors, throttles], right=[duration]),
            cw.GraphWidget(
                title="Chunks",
                left=[_ours("ChunksIn"), _ours("ChunksContextualized"), _ours("ChunksRemembered"), fallbacks],
            ),
            cw.GraphWidget(
                title="Model",
                left=[_ours("ModelCalls"), _ours("ModelRetries"), model_throttles, _ours("ModelFailedCalls")],
                right=[
                    _ours("CacheReadTokens"),
                    _ours("CacheWriteTokens"),
                    _ours("InputTokens"),
                    _ours("OutputTokens"),
                ],
            ),
            *usage,
            *quota,
            *documents,
            cw.AlarmStatusWidget(title="Alarms", alarms=self.alarms),
        )

    def _quota_usage(self, model_id: str, tokens_per_minute: int | None) -> cw.IWidget:
        """The graph of Bedrock's estimate beside the quota, and the alarm near it (appended to alarms)."""
        usage = quota_usage(model_id)  # unlabelled for the alarm: a label makes it a metric-math alarm
        graphed = usage.with_(label=f"{QUOTA_USAGE_METRIC} ({model_id})")
        quota, what = token_quota(model_id, tokens_per_minute)
        title = "Model quota: tokens a minute (Bedrock's estimate, settled calls)"
        if quota is None:  # nothing to set it against: the usage alone
            return cw.GraphWidget(title=title, left=[graphed], width=24)
        threshold = QUOTA_ALARM_SHARE * quota
        self.alarms.append(
            cw.Alarm(
                self,
                "ModelTokensNearQuota",
                metric=usage,
                threshold=threshold,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                evaluation_periods=QUOTA_ALARM_MINUTES,
                datapoints_to_alarm=QUOTA_ALARM_MINUTES,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
                alarm_description=(
                    f"{model_id} used {QUOTA_ALARM_SHARE:.0%} or more of its {quota:,} tokens a minute "
                    f"({what}) for {QUOTA_ALARM_MINUTES} minutes: calls are near throttling. "
                    f"Runbook: {runbook('ModelTokensNearQuota')}"
                ),
            )
        )
        return cw.GraphWidget(
            title=title,
            left=[graphed],
            left_annotations=[
                cw.HorizontalAnnotation(value=quota, label=f"quota {quota:,} ({what})"),
                cw.HorizontalAnnotation(value=threshold, label=f"alarm at {QUOTA_ALARM_SHARE:.0%}"),
            ],
            width=24,
        )
