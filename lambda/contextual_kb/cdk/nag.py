"""cdk-nag (AwsSolutions) acknowledgments, as helpers that know no construct: each construct acknowledges
its own findings where it makes the resource (as CDK's construct libraries own their grants).

They are written as CDK's own ``Validations`` metadata (what cdk-nag 3 reads), so the library never
imports cdk_nag: a user without it loses nothing. A wildcard resource's finding is named from the
resource's own tokens, resolved when the app's references are final (a bucket of another stack is then an
``Fn::ImportValue``, an explicit environment's region a literal) and written as cdk-nag writes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import aws_cdk as cdk
import jsii
from constructs import IConstruct, IValidation

RULE = "AwsSolutions::AwsSolutions-"


def ack(scope: IConstruct, finding: str, reason: str) -> None:
    """One finding (``"L1"``, ``"IAM5[Resource::*]"``) acknowledged on ``scope`` and everything under it."""
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=RULE + finding, reason=reason))


def ack_resources(scope: IConstruct, reason: str, resources: Iterable[str]) -> None:
    """IAM5 for each of ``resources`` (the very strings the statement was made of) that holds a wildcard,
    on the policy or role ``scope`` that carries the statement."""
    scope.node.add_validation(_Acknowledge(scope, reason, list(resources)))


def flatten(value: Any) -> str:
    """A resolved CloudFormation value as cdk-nag names it in a finding (its flattenCfnReference)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.replace("${", "<").replace("}", ">")
    if isinstance(value, dict):
        if value.get("Fn::Join"):
            delimiter, items = value["Fn::Join"]
            return delimiter.join(flatten(item) for item in items)
        if value.get("Fn::Sub"):
            return flatten(value["Fn::Sub"])
        if value.get("Fn::GetAtt"):
            resource, attribute = value["Fn::GetAtt"]
            return f"<{flatten(resource)}.{flatten(attribute)}>"
        if value.get("Fn::ImportValue"):
            return flatten(value["Fn::ImportValue"])
        if value.get("Ref"):
            return f"<{flatten(value['Ref'])}>"
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@jsii.implements(IValidation)
class _Acknowledge:
    """Runs in CDK's validation of the tree: after cross-stack references are resolved, before cdk-nag."""

    def __init__(self, scope: IConstruct, reason: str, resources: list[str]) -> None:
        self.scope, self.reason, self.resources = scope, reason, resources

    def validate(self) -> list[str]:
        stack = cdk.Stack.of(self.scope)
        for resource in self.resources:
            named = flatten(stack.resolve(resource))
            if "*" in named:
                ack(self.scope, f"IAM5[Resource::{named}]", self.reason)
        return []
