"""What the constructs refuse, one line each, before anything is deployed: a setting's typo, a combination
that would be silently ignored (a key for a bucket the user gives, attach mode's keys), and a key the alarm
topic cannot use."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Annotations, Match, Template

from contextual_kb.cdk import ConfigError, ContextualKnowledgeBase, ContextualTransformation
from tests.infra.conftest import NO_BUNDLING, resources

ATTACH = {
    "knowledgeBaseId": "KB12345678",
    "dataSourceId": "DS12345678",
    "knowledgeBaseRoleArn": "arn:aws:iam::123456789012:role/kb",
}
KEY_ARN = "arn:aws:kms:eu-west-1:123456789012:key/11111111-2222-3333-4444-555555555555"


def stack() -> cdk.Stack:
    return cdk.Stack(cdk.App(context=NO_BUNDLING), "User")


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("alarmEmial", "did you mean alarmEmail?"),
        ("functionMemoryMB", "did you mean functionMemoryMb?"),
        ("function_memory_mb", "did you mean functionMemoryMb?"),
        ("kmskey", "did you mean kmsKey?"),
        ("vectorstore", "did you mean vectorStore?"),
        ("@aws-cdk/aws-s3:x", "docs/SETTINGS.md lists them"),
    ],
)
@pytest.mark.parametrize("construct", [ContextualTransformation, ContextualKnowledgeBase])
def test_a_settings_typo_fails_in_one_line_naming_the_setting(construct: Any, key: str, hint: str) -> None:
    with pytest.raises(ConfigError) as raised:
        construct(stack(), "Contextual", settings={key: 1})
    assert str(raised.value) == f"settings {key!r}: not a setting ({hint})"


def test_a_key_that_is_not_a_string_fails_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^settings 1: not a setting"):
        ContextualTransformation(stack(), "Contextual", settings={1: "x"})


def test_attach_mode_keys_are_refused_by_the_transformation_as_by_the_knowledge_base() -> None:
    for construct in (ContextualTransformation, ContextualKnowledgeBase):
        with pytest.raises(ConfigError, match=r"^knowledgeBaseId: a Contextual"):
            construct(stack(), "Contextual", settings=ATTACH)


def test_kms_key_with_the_users_intermediate_bucket_is_refused() -> None:
    scope = stack()
    bucket = s3.Bucket.from_bucket_name(scope, "Mine", "my-intermediate")
    with pytest.raises(ConfigError, match=r"^kmsKey with intermediate_bucket: "):
        ContextualTransformation(scope, "Contextual", settings={"kmsKey": True}, intermediate_bucket=bucket)


def test_kms_key_alone_still_makes_a_bucket_and_a_topic_with_the_key() -> None:
    scope = stack()
    ContextualTransformation(scope, "Contextual", settings={"kmsKey": True})
    template = Template.from_stack(scope).to_json()
    (topic,) = resources(template, "AWS::SNS::Topic").values()
    assert "KmsMasterKeyId" in topic["Properties"]


def test_an_imported_key_is_not_put_on_the_alarm_topic_and_synth_says_so() -> None:
    scope = stack()
    key = kms.Key.from_key_arn(scope, "TheirKey", KEY_ARN)
    bucket = s3.Bucket.from_bucket_attributes(scope, "Mine", bucket_name="mine", encryption_key=key)
    ContextualTransformation(scope, "Contextual", intermediate_bucket=bucket)
    template = Template.from_stack(scope).to_json()
    (topic,) = resources(template, "AWS::SNS::Topic").values()
    assert "KmsMasterKeyId" not in topic.get("Properties", {})
    (warning,) = Annotations.from_stack(scope).find_warning("*", Match.string_like_regexp("imported"))
    assert "alarm topic is not encrypted with it" in str(warning.entry.data)
    # The function still uses the key for the bucket's objects.
    assert KEY_ARN in str(template)


def test_a_second_contextual_knowledge_base_in_one_stack_is_refused_in_one_line() -> None:
    """Their names come from the stack's (collection, policies, KB, data source): the deploy would fail."""
    scope = stack()
    ContextualKnowledgeBase(scope, "First", settings={"vectorStore": "s3vectors"})
    with pytest.raises(ConfigError) as raised:
        ContextualKnowledgeBase(scope, "Second", settings={"vectorStore": "s3vectors"})
    assert str(raised.value) == (
        "a second ContextualKnowledgeBase in stack User: their resources' names come from the stack's name "
        "and would collide at deploy; put each in a stack of its own"
    )


def test_one_contextual_knowledge_base_a_stack_synthesizes_side_by_side() -> None:
    app = cdk.App(context=NO_BUNDLING)
    for name in ("First", "Second"):
        ContextualKnowledgeBase(cdk.Stack(app, name), "Default", settings={"vectorStore": "s3vectors"})
    app.synth()


def _custom_alarms(template: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        a["Properties"]
        for a in resources(template, "AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("Namespace") not in {"AWS/Lambda", "AWS/Bedrock"}
        and a["Properties"]["MetricName"] != "IngestionDocumentsFailed"
    ]


def test_each_transformations_alarms_watch_its_own_function() -> None:
    scope = stack()
    one = ContextualTransformation(scope, "One", settings={"modelTokensPerMinute": 2000})
    two = ContextualTransformation(scope, "Two")
    template = Template.from_stack(scope).to_json()
    watched: dict[str, set[str]] = {}
    for alarm in _custom_alarms(template):
        dimensions = {d["Name"]: d["Value"] for d in alarm["Dimensions"]}
        watched.setdefault(dimensions["FunctionName"]["Ref"], set()).add(alarm["MetricName"])
    ids = {scope.get_logical_id(t.function.node.default_child): t for t in (one, two)}  # type: ignore[arg-type]
    assert set(watched) == set(ids)
    assert all("ContextFallbacks" in names and "ModelThrottles" in names for names in watched.values())


def test_the_alarms_follow_the_functions_powertools_namespace_and_service() -> None:
    scope = stack()
    environment = {"POWERTOOLS_METRICS_NAMESPACE": "MyTeam", "POWERTOOLS_SERVICE_NAME": "docs-kb"}
    ContextualTransformation(scope, "One", settings={"functionEnvironment": environment})
    template = Template.from_stack(scope).to_json()
    alarms = _custom_alarms(template)
    assert alarms and all(a["Namespace"] == "MyTeam" for a in alarms)
    assert all({"Name": "service", "Value": "docs-kb"} in a["Dimensions"] for a in alarms)
    (function,) = [f for f in resources(template, "AWS::Lambda::Function").values()]
    assert function["Properties"]["Environment"]["Variables"]["POWERTOOLS_METRICS_NAMESPACE"] == "MyTeam"


def test_ingestion_logs_are_exported_for_add_monitoring() -> None:
    from contextual_kb.cdk import IngestionLogs

    scope = stack()
    contextual = ContextualTransformation(scope, "Contextual", monitoring=False)
    arn = "arn:aws:bedrock:eu-west-1:123456789012:knowledge-base/KB12345678"
    logs = IngestionLogs(scope, "IngestionLogs", knowledge_base_arn=arn, knowledge_base="KB12345678")
    contextual.add_monitoring(logs)
    alarms = resources(Template.from_stack(scope).to_json(), "AWS::CloudWatch::Alarm").values()
    assert "IngestionDocumentsFailed" in [a["Properties"]["MetricName"] for a in alarms]


def test_an_rpm_for_a_model_aws_lists_none_for_is_ignored_with_one_warning_at_synth() -> None:
    """Issue 52: Bedrock enforces no RPM for some models (pricing.listed_rpm is None, here Opus 4.7): the
    stack's modelRequestsPerMinute is ignored with one synth warning, as the function ignores it; a model
    AWS lists one for keeps it."""
    opus = {"functionEnvironment": {"MODEL_ID": "global.anthropic.claude-opus-4-7"}}
    scope = stack()
    settings = {**opus, "modelRequestsPerMinute": 500, "modelTokensPerMinute": 400_000}
    ContextualTransformation(scope, "Contextual", settings=settings)
    template = Template.from_stack(scope).to_json()
    (function,) = [
        f for f in resources(template, "AWS::Lambda::Function").values()
        if "MODEL_TOKENS_PER_MINUTE" in str(f)
    ]  # fmt: skip
    variables = function["Properties"]["Environment"]["Variables"]
    assert variables["MODEL_REQUESTS_PER_MINUTE"] == "0" and variables["MODEL_TOKENS_PER_MINUTE"] == "400000"
    (warning,) = Annotations.from_stack(scope).find_warning("*", Match.string_like_regexp("modelRequests"))
    assert "modelRequestsPerMinute=500 ignored: AWS lists no requests-per-minute" in str(warning.entry.data)
