"""Log groups: a month of logs, deleted with the stack.

Kept log groups outlive every ``cdk destroy`` and every rolled-back first deploy, and each new deploy makes a
new set under new names: they go with the stack (the documents and contexts are in the kept buckets).
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from contextual_kb.cdk import nag


def month_of_logs(scope: Construct, construct_id: str, *, name: str | None = None) -> logs.LogGroup:
    return logs.LogGroup(
        scope,
        construct_id,
        log_group_name=name,
        retention=logs.RetentionDays.ONE_MONTH,
        removal_policy=RemovalPolicy.DESTROY,
    )


def logs_statement(role: iam.IRole, log_group: logs.ILogGroup) -> iam.PolicyStatement:
    """A function's own log group and its streams (instead of AWSLambdaBasicExecutionRole), its wildcard
    acknowledged on ``role``."""
    streams = f"{log_group.log_group_arn}:log-stream:*"
    nag.ack_resources(
        role,
        "Lambda creates one log stream per execution environment in the function's own log group.",
        [streams],
    )
    return iam.PolicyStatement(
        actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[log_group.log_group_arn, streams]
    )
