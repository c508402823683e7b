"""The constructs' cdk-nag acknowledgments on an aws-cdk-lib whose ``Validations`` cannot take their IDs
(below 2.270, down to the floor 2.250: cdk/nag.py): the very findings, with the very reasons, on the very
CfnResources that ``Validations`` acknowledges them for, written instead as cdk-nag 2's ``cdk_nag`` metadata
(what ``NagSuppressions.addResourceSuppressions(scope, ..., True)`` writes). Here on the newest aws-cdk-lib
with the fallback forced; aws-cdk-lib 2.250 itself is synthesized by ``make test-ends``'s lowest end."""

from __future__ import annotations

import base64
from typing import Any

import aws_cdk as cdk
import pytest

from contextual_kb.cdk import nag
from contextual_kb.cdk.config import load
from stacks.app_builder import _context_keys, feature_flags
from stacks.stack import ContextualKbStack
from tests.infra.conftest import NO_BUNDLING
from tests.user_apps import l1_app

ACKNOWLEDGED = "aws:cdk:acknowledged-rules"
Findings = dict[str, set[tuple[str, str]]]


def repository_stack(app: cdk.App) -> cdk.Stack:
    """The repository's stack with its deferred workflow and alarm topic (most of the constructs' findings),
    without the app's cdk-nag 3 plugin (it reads only ``Validations``)."""
    config = load({key: app.node.try_get_context(key) for key in _context_keys()})
    return ContextualKbStack(app, config.stack_name, config=config)


REPOSITORY = {**feature_flags(), "contextDefer": "fallbacks", "alarmEmail": "ops@example.com"}
BUILDS = {"l1": (l1_app.build, {"userNag": "off"}), "repository": (repository_stack, REPOSITORY)}


def synthesized(name: str) -> cdk.App:
    build, context = BUILDS[name]
    app = cdk.App(context={**NO_BUNDLING, **context})
    build(app)
    app.synth()
    return app


def cfn_resources(app: cdk.App) -> list[cdk.CfnResource]:
    return [node for node in app.node.find_all() if cdk.CfnResource.is_cfn_resource(node)]  # type: ignore[misc]


def by_validations(app: cdk.App) -> Findings:
    """Per CfnResource: the acknowledgments of it and its ancestors (what cdk-nag 3 looks up)."""
    found: Findings = {}
    for resource in cfn_resources(app):
        held = found.setdefault(resource.node.path, set())
        scope: Any = resource
        while scope is not None:
            for entry in scope.node.metadata:
                if entry.type == ACKNOWLEDGED:
                    held |= {(key.removeprefix(nag.RULE), reason) for key, reason in entry.data.items()}
            scope = scope.node.scope
    return found


def by_metadata(app: cdk.App) -> Findings:
    """Per CfnResource: its ``cdk_nag`` rules read back as cdk-nag 2 reads them (toApiFormat, doesApply)."""
    found: Findings = {}
    for resource in cfn_resources(app):
        held = found.setdefault(resource.node.path, set())
        for rule in (resource.get_metadata("cdk_nag") or {}).get("rules_to_suppress", []):
            assert set(rule) <= {"id", "reason", "applies_to", "is_reason_encoded"}, rule
            assert rule["id"].startswith(nag.PACK) and "[" not in rule["id"], rule  # cdk-nag 2 refuses it
            reason = rule["reason"]
            if rule.get("is_reason_encoded"):
                reason = base64.b64decode(reason).decode()
            assert len(reason) >= 10, rule  # cdk-nag 2 refuses a shorter one
            rule_name = rule["id"].removeprefix(nag.PACK)
            for applies in rule.get("applies_to", [None]):
                held.add((f"{rule_name}[{applies}]" if applies else rule_name, reason))
    return found


@pytest.mark.parametrize("name", ["l1", "repository"])
def test_the_fallback_writes_what_validations_acknowledges(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = by_validations(synthesized(name))
    assert any(expected.values()) and not any(by_metadata(synthesized(name)).values())
    monkeypatch.setattr(nag, "validations_take_ids", lambda: False)
    fallen = synthesized(name)
    assert not any(by_validations(fallen).values())
    assert by_metadata(fallen) == expected


def test_a_finding_becomes_cdk_nag_2s_rule_with_what_it_applies_to() -> None:
    assert nag.suppression("IAM5[Resource::*]", "the reason why") == {
        "reason": "the reason why",
        "id": "AwsSolutions-IAM5",
        "applies_to": ["Resource::*"],
    }
    assert nag.suppression("L1", "the reason why") == {"reason": "the reason why", "id": "AwsSolutions-L1"}
    encoded = nag.suppression("IAM5[Resource::a:*]", "raison d’être ≥ 10")
    assert encoded["is_reason_encoded"] is True
    assert base64.b64decode(encoded["reason"]).decode() == "raison d’être ≥ 10"


def test_the_newest_aws_cdk_lib_takes_the_ids() -> None:
    assert nag.validations_take_ids()
