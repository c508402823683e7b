"""A dashboard and alarms: the function's errors, duration near its timeout, throttles, and our own metrics
(chunks given the fallback context, model throttles; with a shared model quota, attempts sent without
turns)."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

NAMESPACE = "ContextualKB"
SERVICE = "contextual-kb"


def _ours(name: str, strategy: str = "claude") -> cw.Metric:
    return cw.Metric(
        namespace=NAMESPACE,
        metric_name=name,
        dimensions_map={"Strategy": strategy, "service": SERVICE},
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
        shares_quota: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        errors = function.metric_errors(period=Duration.minutes(5), statistic="Sum")
        duration = function.metric_duration(period=Duration.minutes(5), statistic="Maximum")
        throttles = function.metric_throttles(period=Duration.minutes(5), statistic="Sum")
        fallbacks, model_throttles = _ours("ContextFallbacks"), _ours("ModelThrottles")
        self.alarms = [
            cw.Alarm(self, "Errors", metric=errors, threshold=1, evaluation_periods=1,
                     alarm_description="The transformation failed: the KB marks those files failed.",
                     treat_missing_data=cw.TreatMissingData.NOT_BREACHING),
            cw.Alarm(self, "DurationNearTimeout", metric=duration, threshold=0.9 * timeout_seconds * 1000,
                     evaluation_periods=1, treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
                     alarm_description="An invocation used over 90% of the timeout: chunks may fall back."),
            cw.Alarm(self, "Throttles", metric=throttles, threshold=1, evaluation_periods=1,
                     treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
                     alarm_description="Lambda throttled the function."),
            cw.Alarm(self, "Fallbacks", metric=fallbacks, threshold=1, evaluation_periods=1,
                     treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
                     alarm_description="Chunks got the structural context, not Claude's (Fallback_*)."),
            cw.Alarm(self, "ModelThrottles", metric=model_throttles, threshold=100, evaluation_periods=1,
                     treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
                     alarm_description="Bedrock throttled many model calls: consider a quota increase."),
        ]  # fmt: skip
        quota: list[cw.IWidget] = []
        if shares_quota:  # the quota's table could not be used: calls went without turns (OPERATIONS.md)
            without_turns = _ours("AttemptsWithoutQuotaTurns")
            waits = _ours("QuotaWaitSeconds")
            quota = [cw.GraphWidget(title="Shared model quota", left=[without_turns], right=[waits])]
            self.alarms.append(
                cw.Alarm(
                    self,
                    "AttemptsWithoutQuotaTurns",
                    metric=without_turns,
                    threshold=1,
                    evaluation_periods=1,
                    treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
                    alarm_description="The shared quota's table could not be used (deleted, denied, slow): "
                    "model calls went without turns. The function's log says why.",
                )
            )
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
            cw.AlarmStatusWidget(title="Alarms", alarms=self.alarms),
        )
