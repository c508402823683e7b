"""cdk-nag (AwsSolutions) acknowledgments, as helpers that know no construct: each construct acknowledges
its own findings where it makes the resource (as CDK's construct libraries own their grants).

They are written as CDK's own ``Validations`` metadata (what cdk-nag 3 reads), so the library never
imports cdk_nag: a user without it loses nothing. A wildcard resource's finding is named from the
resource's own tokens, resolved when the app's references are final (a bucket of another stack is then an
``Fn::ImportValue``, an explicit environment's region a literal) and written as cdk-nag writes it.

An aws-cdk-lib whose ``Validations`` cannot take these IDs (below 2.252 it has no ``acknowledge``; up to
2.264 it refuses the '::' inside ``IAM5[Resource::*]``) gets what cdk-nag 2, the cdk-nag of those versions,
reads instead: the ``cdk_nag`` metadata of each CfnResource under the scope (its
``NagSuppressions.addResourceSuppressions(scope, ..., applyToChildren=True)``), written by an aspect that
runs before cdk-nag 2's (a mutating aspect's priority), with the names resolved as cdk-nag 2 sees them then.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Callable, Iterable
from typing import Any

import aws_cdk as cdk
import constructs
import jsii
from constructs import IConstruct, IValidation

PACK = "AwsSolutions-"
RULE = "AwsSolutions::" + PACK
# The hardest ID the constructs acknowledge: a finding with '::' inside (2.252-2.264 refuse it).
_PROBE = "IAM5[Resource::*]"


@functools.cache
def validations_take_ids() -> bool:
    """Whether this aws-cdk-lib's ``Validations.acknowledge`` takes the constructs' IDs: tried once, on a
    throwaway root (an acknowledgment in the user's tree would suppress a finding)."""
    if not hasattr(cdk, "Acknowledgment") or not hasattr(cdk, "Validations"):
        return False
    root = constructs.RootConstruct("probe") if hasattr(constructs, "RootConstruct") else cdk.App()
    try:
        cdk.Validations.of(root).acknowledge(cdk.Acknowledgment(id=RULE + _PROBE, reason="feature probe"))
    except RuntimeError:  # jsii's error for the JavaScript one: InvalidValidationId
        return False
    return True


def ack(scope: IConstruct, finding: str, reason: str) -> None:
    """One finding (``"L1"``, ``"IAM5[Resource::*]"``) acknowledged on ``scope`` and everything under it."""
    if validations_take_ids():
        cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=RULE + finding, reason=reason))
    else:
        _suppress(scope, reason, lambda: [finding])


def ack_resources(scope: IConstruct, reason: str, resources: Iterable[str]) -> None:
    """IAM5 for each of ``resources`` (the very strings the statement was made of) that holds a wildcard,
    on the policy or role ``scope`` that carries the statement."""
    listed = list(resources)
    if validations_take_ids():
        scope.node.add_validation(_Acknowledge(scope, reason, listed))
    else:
        _suppress(scope, reason, lambda: wildcards(scope, listed))


def wildcards(scope: IConstruct, resources: list[str]) -> list[str]:
    """The IAM5 findings of ``resources``, named as cdk-nag names them when the tokens resolve now."""
    stack = cdk.Stack.of(scope)
    named = (flatten(stack.resolve(resource)) for resource in resources)
    return [f"IAM5[Resource::{name}]" for name in named if "*" in name]


def suppression(finding: str, reason: str) -> dict[str, Any]:
    """One finding as cdk-nag 2's ``cdk_nag`` metadata holds it (its NagSuppressionHelper.toCfnFormat): the
    rule's ID, the finding inside the brackets as ``applies_to`` (matched whole), a reason beyond Latin-1
    base64-encoded."""
    rule, _, inside = finding.partition("[")
    entry: dict[str, Any] = {"id": PACK + rule}
    if inside:
        entry["applies_to"] = [inside.removesuffix("]")]
    if any(ord(c) > 255 for c in reason):
        entry["is_reason_encoded"] = True
        return {"reason": base64.b64encode(reason.encode()).decode(), **entry}
    return {"reason": reason, **entry}


def _suppress(scope: IConstruct, reason: str, findings: Callable[[], list[str]]) -> None:
    cdk.Aspects.of(scope).add(_Suppress(reason, findings), priority=cdk.AspectPriority.MUTATING)


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
        for finding in wildcards(self.scope, self.resources):
            ack(self.scope, finding, self.reason)
        return []


@jsii.implements(cdk.IAspect)
class _Suppress:
    """cdk-nag 2's ``cdk_nag`` metadata on each CfnResource it visits (the scope and everything under it),
    added to what is there, each rule once; the findings named at the first visit."""

    def __init__(self, reason: str, findings: Callable[[], list[str]]) -> None:
        self.reason, self.findings = reason, findings
        self.rules: list[dict[str, Any]] | None = None

    def visit(self, node: IConstruct) -> None:
        if not cdk.CfnResource.is_cfn_resource(node):
            return
        if self.rules is None:
            self.rules = [suppression(finding, self.reason) for finding in self.findings()]
        if not self.rules:
            return
        resource: cdk.CfnResource = node  # type: ignore[assignment]
        held = list((resource.get_metadata("cdk_nag") or {}).get("rules_to_suppress") or [])
        for rule in self.rules:
            if rule not in held:
                held.append(rule)
        resource.add_metadata("cdk_nag", {"rules_to_suppress": held})
