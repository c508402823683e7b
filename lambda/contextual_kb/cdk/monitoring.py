"""A dashboard and alarms: the function's errors, duration near its timeout, throttles, and our own metrics
(chunks given the fallback context, model throttles; with a shared model quota, attempts sent without
turns; with the Knowledge Base's ingestion logs, documents that failed). Every alarm notifies the alarm
topic when it fires and when it clears, and its description links to its runbook entry."""

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

if TYPE_CHECKING:
    from contextual_kb.cdk.ingestion_logs import IngestionLogs

# Each alarm's entry in the runbook is the page's heading "Alarm: <its id>", whose anchor is alarm-<its id>.
RUNBOOK_PAGE = "docs/OPERATIONS.md"


def runbook(alarm_id: str) -> str:
    return f"{RUNBOOK_PAGE}#alarm-{alarm_id.lower()}"


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
    ) -> None:
        """``namespace``, ``service``: the function's POWERTOOLS_METRICS_NAMESPACE and
        POWERTOOLS_SERVICE_NAME (the alarms watch what it emits)."""
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
            *quota,
            *documents,
            cw.AlarmStatusWidget(title="Alarms", alarms=self.alarms),
        )
