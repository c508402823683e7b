"""The dashboard graphs Bedrock's EstimatedTPMQuotaUsage for the function's model beside its quota, and an
alarm warns when it stays near the quota (issue 52, item 3): the metric as AWS publishes it (AWS/Bedrock,
ModelId = the id called, a 1-minute series summed), the quota that applies (modelTokensPerMinute, else the
default AWS lists for the model and scope, else none and no alarm), in templates that pass cdk-nag (synth)
and cfn-lint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextual_kb.cdk.monitoring import QUOTA_ALARM_MINUTES, QUOTA_ALARM_SHARE, token_quota
from contextual_kb.runtime.settings import DEFAULT_MODEL_ID
from tests.infra.conftest import cfn_lint, resources, synth_variants

OPUS = "us.anthropic.claude-opus-4-7-v1:0"  # AWS's notes list no tokens-per-minute default for it here
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {"vectorStore": "opensearch"},
    "shared": {
        "vectorStore": "opensearch",
        "modelRequestsPerMinute": 2000,
        "modelTokensPerMinute": 3_600_000,
        "modelOutputBurndown": 5,
    },
    "unlisted": {"vectorStore": "opensearch", "functionEnvironment": {"MODEL_ID": OPUS}},
    "no-model": {"vectorStore": "opensearch", "functionEnvironment": {"CONTEXT_STRATEGY": "structural"}},
}


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    return synth_variants(tmp_path_factory.mktemp("quota-usage"), VARIANTS)


def usage_alarms(template: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        a["Properties"]
        for a in resources(template, "AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == "EstimatedTPMQuotaUsage"
    ]


def dashboard(template: dict[str, Any]) -> str:
    (board,) = resources(template, "AWS::CloudWatch::Dashboard").values()
    return json.dumps(board["Properties"]["DashboardBody"])


def test_the_templates_pass_cfn_lint(templates: dict[str, tuple[Path, dict[str, Any]]]) -> None:
    result = cfn_lint([path for path, _ in templates.values()])
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_alarm_watches_bedrocks_estimate_for_the_model_near_its_listed_quota(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    template = templates["default"][1]
    (alarm,) = usage_alarms(template)
    assert alarm["Namespace"] == "AWS/Bedrock"
    assert alarm["Dimensions"] == [{"Name": "ModelId", "Value": DEFAULT_MODEL_ID}]  # the profile's id
    assert (alarm["Statistic"], alarm["Period"]) == ("Sum", 60)  # tokens a minute
    # Haiku 4.5 through a global profile: 5,000,000 listed; 80% of it in each of 5 minutes in a row
    assert alarm["Threshold"] == 4_000_000 == QUOTA_ALARM_SHARE * 5_000_000
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["EvaluationPeriods"] == alarm["DatapointsToAlarm"] == QUOTA_ALARM_MINUTES == 5
    assert alarm["TreatMissingData"] == "notBreaching"  # no completed call, no data: not a breach
    assert alarm["AlarmActions"] and alarm["AlarmActions"] == alarm["OKActions"]
    assert alarm["AlarmDescription"].endswith("Runbook: docs/OPERATIONS.md#alarm-modeltokensnearquota")
    assert "listed default, global" in alarm["AlarmDescription"]
    body = dashboard(template)
    assert "EstimatedTPMQuotaUsage" in body and DEFAULT_MODEL_ID in body
    assert "quota 5,000,000 (listed default, global)" in body and "alarm at 80%" in body


def test_a_shared_quota_is_the_one_the_usage_is_set_against(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    template = templates["shared"][1]
    (alarm,) = usage_alarms(template)
    assert alarm["Threshold"] == 0.8 * 3_600_000
    assert "(modelTokensPerMinute)" in alarm["AlarmDescription"]
    assert "quota 3,600,000 (modelTokensPerMinute)" in dashboard(template)


def test_without_a_quota_known_the_usage_is_graphed_and_nothing_alarms(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    template = templates["unlisted"][1]
    assert usage_alarms(template) == []
    body = dashboard(template)
    assert "EstimatedTPMQuotaUsage" in body and OPUS in body and "alarm at" not in body


def test_a_function_that_calls_no_model_gets_neither(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    template = templates["no-model"][1]
    assert usage_alarms(template) == [] and "EstimatedTPMQuotaUsage" not in dashboard(template)


def test_the_quota_is_the_given_one_else_the_listed_default_of_the_scope() -> None:
    haiku = "anthropic.claude-haiku-4-5-20251001-v1:0"
    assert token_quota(f"us.{haiku}", 900_000) == (900_000, "modelTokensPerMinute")
    assert token_quota(f"us.{haiku}") == (5_000_000, "listed default, geo")
    assert token_quota(haiku) == (None, "")  # Haiku 4.5 lists no in-Region row
    assert token_quota("anthropic.claude-sonnet-4-6") == (3_000_000, "listed default, in-region")
