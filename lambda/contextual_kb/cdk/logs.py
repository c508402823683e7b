"""Log groups: a month of logs, deleted with the stack.

Kept log groups outlive every ``cdk destroy`` and every rolled-back first deploy, and each new deploy makes a
new set under new names: they go with the stack (the documents and contexts are in the kept buckets).
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_logs as logs
from constructs import Construct


def month_of_logs(scope: Construct, construct_id: str, *, name: str | None = None) -> logs.LogGroup:
    return logs.LogGroup(
        scope,
        construct_id,
        log_group_name=name,
        retention=logs.RetentionDays.ONE_MONTH,
        removal_policy=RemovalPolicy.DESTROY,
    )
