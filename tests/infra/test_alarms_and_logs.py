"""Alarms that reach someone and the Knowledge Base's own ingestion logs (issue 42), in templates the pinned
CDK CLI synthesizes as `make deploy` runs it (cdk-nag in synth: a finding fails it), each passing cfn-lint:
the full stack and attach mode, with and without the stack's key, the stack's topic with an address
subscribed or the user's topic, the ingestion logs on and off. A malformed address or ARN fails synth in one
line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from contextual_kb.cdk.deferred_workflow import ALARM_IDS
from tests.infra.conftest import cfn_lint, resources
from tests.infra.test_readme_commands import ROOT, SYNTHS_HANG_GUARD, cdk_commands, synth, synthesize_each

EMAIL = "oncall@example.com"
TOPIC = "arn:aws:sns:us-east-1:123456789012:oncall"
KB_ID, DS_ID, ROLE = "ABCDEFGHIJ", "KLMNOPQRST", "arn:aws:iam::123456789012:role/kb-service-role"
ATTACH = [f"KNOWLEDGE_BASE_ID={KB_ID}", f"DATA_SOURCE_ID={DS_ID}", f"KNOWLEDGE_BASE_ROLE_ARN={ROLE}"]
pytestmark = SYNTHS_HANG_GUARD
# name: (make arguments, the stack, its topic is ours, ingestion logs delivered, the stack's key)
VARIANTS: dict[str, tuple[list[str], str, bool, bool, bool]] = {
    "full-email": ([f"CDK_CONTEXT=-c alarmEmail={EMAIL}"], "ContextualKb", True, True, False),
    "full-kms-email": (
        ["VECTOR_STORE=s3vectors", f"CDK_CONTEXT=-c kmsKey=true -c alarmEmail={EMAIL}"],
        "ContextualKb",
        True,
        True,
        True,
    ),
    "full-topic-nologs": (
        [f"CDK_CONTEXT=-c alarmTopicArn={TOPIC} -c ingestionLogs=false"],
        "ContextualKb",
        False,
        False,
        False,
    ),
    "attach-email": (
        [*ATTACH, f"CDK_CONTEXT=-c alarmEmail={EMAIL}"],
        "ContextualKbAttached",
        True,
        True,
        False,
    ),
    "attach-kms": ([*ATTACH, "CDK_CONTEXT=-c kmsKey=true"], "ContextualKbAttached", True, True, True),
    "attach-topic-nologs": (
        [*ATTACH, f"CDK_CONTEXT=-c alarmTopicArn={TOPIC} -c ingestionLogs=false"],
        "ContextualKbAttached",
        False,
        False,
        False,
    ),
}
ALARMS = {"Errors", "DurationNearTimeout", "Throttles", "Fallbacks", "ModelThrottles", "ModelTokensNearQuota"}


def _command(args: list[str]) -> list[str]:
    """The CDK CLI call `make deploy` makes with ``args``."""
    (command,) = cdk_commands(["deploy", *args], {})
    return command


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    folder = tmp_path_factory.mktemp("alarms")
    calls = {name: (_command(args), folder / name) for name, (args, *_) in VARIANTS.items()}
    out = {}
    for name, ran in synthesize_each(calls).items():
        stack = VARIANTS[name][1]
        assert ran.returncode == 0, f"{name}: {ran.stderr[-3000:]}"
        path = folder / name / f"{stack}.template.json"
        out[name] = (path, json.loads(path.read_text()))
    return out


def test_every_variant_passes_cfn_lint(templates: dict[str, tuple[Path, dict[str, Any]]]) -> None:
    result = cfn_lint([path for path, _ in templates.values()])
    assert result.returncode == 0, result.stdout + result.stderr


def _topic(template: dict[str, Any], ours: bool) -> Any:
    """What the alarms name as their action: the stack's topic (a Ref), or the user's ARN."""
    topics = resources(template, "AWS::SNS::Topic")
    if not ours:
        assert not topics
        return TOPIC
    (topic_id,) = topics
    return {"Ref": topic_id}


@pytest.mark.parametrize("name", VARIANTS)
def test_every_alarm_notifies_the_topic_when_it_fires_and_when_it_clears(
    templates: dict[str, tuple[Path, dict[str, Any]]], name: str
) -> None:
    _, _, ours, logs, _ = VARIANTS[name]
    template = templates[name][1]
    topic = _topic(template, ours)
    alarms = resources(template, "AWS::CloudWatch::Alarm")
    expected = ALARMS | ({"IngestionDocumentsFailed"} if logs else set())
    assert {re.sub(r"^Monitoring|[0-9A-F]{8}$", "", k) for k in alarms} == expected
    for alarm in alarms.values():
        assert alarm["Properties"]["AlarmActions"] == [topic]
        assert alarm["Properties"]["OKActions"] == [topic]
    assert template["Outputs"]["AlarmTopicArn"]["Value"] == topic


def test_each_alarms_description_links_to_its_runbook_entry(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """docs/OPERATIONS.md has an entry per alarm ("### Alarm: <id>": what it means, what to check first, the
    commands that show it); each description ends with the link to it."""
    runbook = (ROOT / "docs" / "OPERATIONS.md").read_text()
    headings = {m.group(1) for m in re.finditer(r"^### Alarm: (\w+)$", runbook, re.MULTILINE)}
    seen = set()
    for _, template in templates.values():
        for logical, alarm in resources(template, "AWS::CloudWatch::Alarm").items():
            alarm_id = re.sub(r"^Monitoring|[0-9A-F]{8}$", "", logical)
            description = alarm["Properties"]["AlarmDescription"]
            assert description.endswith(f" Runbook: docs/OPERATIONS.md#alarm-{alarm_id.lower()}"), description
            assert alarm_id in headings, alarm_id
            seen.add(alarm_id)
    entries = re.split(r"^### Alarm: ", runbook, flags=re.MULTILINE)[1:]
    for entry in entries:
        body = entry.split("\n## ", 1)[0]
        assert "**Means:**" in body and "**Check first:**" in body
        steps = re.findall(r"^\d\. ", body, re.MULTILINE)
        assert len(steps) == 3, entry[:40]
        assert "`" in body  # the commands that show it
    # The quota's alarm: tests/infra/test_variants.py; the deferred workflow's: test_deferred_workflow.py.
    assert seen | {"AttemptsWithoutQuotaTurns", *ALARM_IDS} == headings


@pytest.mark.parametrize("name", VARIANTS)
def test_the_stacks_topic_is_tls_only_cloudwatch_may_publish_and_the_key_encrypts_it(
    templates: dict[str, tuple[Path, dict[str, Any]]], name: str
) -> None:
    _, _, ours, _, kms = VARIANTS[name]
    template = templates[name][1]
    if not ours:
        assert not resources(template, "AWS::SNS::TopicPolicy")
        assert not resources(template, "AWS::SNS::Subscription")
        return
    ((topic_id, topic),) = resources(template, "AWS::SNS::Topic").items()
    (policy,) = resources(template, "AWS::SNS::TopicPolicy").values()
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert statements["AllowPublishThroughSSLOnly"]["Effect"] == "Deny"
    assert statements["AllowPublishThroughSSLOnly"]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    publish = statements["AllowPublishAlarms"]
    assert (publish["Principal"], publish["Action"]) == (
        {"Service": "cloudwatch.amazonaws.com"},
        "sns:Publish",
    )
    assert publish["Resource"] == {"Ref": topic_id}
    assert ":alarm:*" in json.dumps(publish["Condition"]["ArnLike"]["aws:SourceArn"])
    keys = resources(template, "AWS::KMS::Key")
    if not kms:
        assert "KmsMasterKeyId" not in topic.get("Properties", {}) and not keys
        return
    ((key_id, key),) = keys.items()
    assert topic["Properties"]["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    (cloudwatch,) = [
        s
        for s in key["Properties"]["KeyPolicy"]["Statement"]
        if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert sorted(cloudwatch["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey*"]


def test_an_address_is_subscribed_to_the_stacks_topic(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    for name in ("full-email", "full-kms-email", "attach-email"):
        template = templates[name][1]
        (topic_id,) = resources(template, "AWS::SNS::Topic")
        (subscription,) = resources(template, "AWS::SNS::Subscription").values()
        assert subscription["Properties"] == {
            "Endpoint": EMAIL,
            "Protocol": "email",
            "TopicArn": {"Ref": topic_id},
        }
    assert not resources(templates["attach-kms"][1], "AWS::SNS::Subscription")


@pytest.mark.parametrize("name", VARIANTS)
def test_the_knowledge_bases_ingestion_logs_are_delivered_counted_and_graphed(
    templates: dict[str, tuple[Path, dict[str, Any]]], name: str
) -> None:
    """APPLICATION_LOGS from a delivery source on the Knowledge Base's ARN (ours, or the attached one's), a
    destination on a log group kept a month and deleted with the stack, a delivery between them; a metric
    filter counting documents whose final status is FAILED, by the Knowledge Base's ARN, which the alarm
    and the dashboard follow. Off: none of it."""
    _, stack, _, logs, _ = VARIANTS[name]
    template = templates[name][1]
    kinds = ("AWS::Logs::DeliverySource", "AWS::Logs::DeliveryDestination", "AWS::Logs::Delivery")
    if not logs:
        assert not any(resources(template, kind) for kind in (*kinds, "AWS::Logs::MetricFilter"))
        assert "IngestionLogGroupName" not in template["Outputs"]
        assert "IngestionDocumentsFailed" not in json.dumps(template)
        return
    group_name = f"/aws/vendedlogs/bedrock/knowledge-bases/{stack}"
    ((group_id, group),) = [
        (k, g) for k, g in resources(template, "AWS::Logs::LogGroup").items() if k.startswith("IngestionLogs")
    ]
    assert group["Properties"] == {"LogGroupName": group_name, "RetentionInDays": 30}
    assert group["DeletionPolicy"] == "Delete"
    ((source_id, source),) = resources(template, "AWS::Logs::DeliverySource").items()
    ((destination_id, destination),) = resources(template, "AWS::Logs::DeliveryDestination").items()
    (delivery,) = resources(template, "AWS::Logs::Delivery").values()
    assert source["Properties"]["LogType"] == "APPLICATION_LOGS"
    if stack == "ContextualKb":
        (kb_id,) = resources(template, "AWS::Bedrock::KnowledgeBase")
        kb_arn: Any = {"Fn::GetAtt": [kb_id, "KnowledgeBaseArn"]}
    else:
        kb_arn = {
            "Fn::Join": [
                "",
                ["arn:", {"Ref": "AWS::Partition"}, ":bedrock:", {"Ref": "AWS::Region"}, ":",
                 {"Ref": "AWS::AccountId"}, f":knowledge-base/{KB_ID}"],
            ]
        }  # fmt: skip
    assert source["Properties"]["ResourceArn"] == kb_arn
    assert destination["Properties"]["OutputFormat"] == "json"
    assert json.dumps(destination["Properties"]["DestinationResourceArn"]).endswith(
        f':log-group:{group_name}"]]}}'
    )
    assert group_id in destination["DependsOn"]
    assert delivery["Properties"] == {
        "DeliverySourceName": source["Properties"]["Name"],
        "DeliveryDestinationArn": {"Fn::GetAtt": [destination_id, "Arn"]},
    }
    assert source_id in delivery["DependsOn"]
    names = (source["Properties"]["Name"], destination["Properties"]["Name"])
    assert all(re.fullmatch(r"[\w-]{1,60}", n) for n in names), names
    (metric_filter,) = resources(template, "AWS::Logs::MetricFilter").values()
    assert metric_filter["Properties"]["LogGroupName"] == {"Ref": group_id}
    assert metric_filter["Properties"]["FilterPattern"] == (
        '{ ($.event_type = "StartIngestionJob.ResourceStatusChanged") && ($.event.status = "FAILED") }'
    )
    assert metric_filter["Properties"]["MetricTransformations"] == [
        {
            "MetricName": "IngestionDocumentsFailed",
            "MetricNamespace": "ContextualKB",
            "MetricValue": "1",
            "Dimensions": [{"Key": "KnowledgeBaseArn", "Value": "$.event.knowledge_base_arn"}],
        }
    ]
    (alarm,) = [
        a["Properties"]
        for a in resources(template, "AWS::CloudWatch::Alarm").values()
        if a["Properties"]["MetricName"] == "IngestionDocumentsFailed"
    ]
    assert (alarm["Namespace"], alarm["Statistic"], alarm["Threshold"]) == ("ContextualKB", "Sum", 1)
    assert alarm["Dimensions"] == [{"Name": "KnowledgeBaseArn", "Value": kb_arn}]
    (dashboard,) = resources(template, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    assert "IngestionDocumentsFailed" in body and "event.status_reasons.0" in body and group_name in body
    assert template["Outputs"]["IngestionLogGroupName"]["Value"] == group_name


def test_attach_mode_adds_the_delivery_after_the_inspection_and_before_switching_the_data_source(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """A Knowledge Base the inspection refuses gets no delivery; a delivery that fails rolls back before the
    data source is touched."""
    template = templates["attach-email"][1]
    (inspection,) = resources(template, "Custom::DataSourceInspection")
    (attachment,) = resources(template, "Custom::DataSourceAttachment").values()
    for kind in ("AWS::Logs::DeliverySource", "AWS::Logs::DeliveryDestination", "AWS::Logs::Delivery"):
        ((logical, found),) = resources(template, kind).items()
        assert inspection in found["DependsOn"], kind
        assert logical in attachment["DependsOn"], kind


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (
            "-c alarmEmail=oncall.example.com",
            "error: CDK context alarmEmail: 'oncall.example.com' is not an email address (name@example.com)",
        ),
        (
            "-c alarmTopicArn=arn:aws:sqs:us-east-1:123456789012:oncall",
            "error: CDK context alarmTopicArn: 'arn:aws:sqs:us-east-1:123456789012:oncall' is not an SNS "
            "topic's ARN (arn:aws:sns:us-east-1:123456789012:alarms)",
        ),
        (
            f"-c alarmEmail={EMAIL} -c alarmTopicArn={TOPIC}",
            "error: CDK context: alarmEmail with alarmTopicArn: the alarms go to your topic; subscribe the "
            "address to it",
        ),
    ],
)
def test_a_malformed_address_or_arn_fails_synth_in_one_line(
    tmp_path: Path, setting: str, message: str
) -> None:
    ran = synth(_command([f"CDK_CONTEXT={setting}"]), tmp_path / "out")
    assert ran.returncode != 0
    errors = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
    assert errors == [message]
    assert "Traceback" not in ran.stderr


@pytest.mark.parametrize(
    "value",
    [
        "a@b",
        "a b@example.com",
        "@example.com",
        "a@@example.com",
        "a@example..com",
        "a@example.com\n",
        "a@example.com,b@example.com",  # one address a setting
        "On Call <oncall@example.com>",
        "<oncall@example.com>",
        "a,b@example.com",
    ],
)
def test_addresses_sns_cannot_mail_are_refused(value: str) -> None:
    from contextual_kb.cdk.config import ConfigError, load

    with pytest.raises(ConfigError, match=r"alarmEmail: .* is not an email address"):
        load({"alarmEmail": value})


@pytest.mark.parametrize(
    "value",
    [
        "arn:aws:sns:us-east-1:12345678901:oncall",  # an account of 11 digits
        "arn:aws:sns:us-east-1:123456789012:",  # no name
        "arn:aws:sns:us-east-1:123456789012:on call",
        "arn:aws:sns::123456789012:oncall",  # no region
        f"{TOPIC}:subscription-id",  # a subscription's ARN
        f"{TOPIC}\n",
    ],
)
def test_arns_that_are_not_a_topics_are_refused(value: str) -> None:
    from contextual_kb.cdk.config import ConfigError, load

    with pytest.raises(ConfigError, match=r"alarmTopicArn: .* is not an SNS topic's ARN"):
        load({"alarmTopicArn": value})


def test_good_addresses_and_arns_are_taken() -> None:
    from contextual_kb.cdk.config import load

    assert load({"alarmEmail": "first.last+ops@mail.example.co.uk"}).alarm_email
    assert load(
        {"alarmTopicArn": "arn:aws-us-gov:sns:us-gov-west-1:123456789012:ops_alarms-1"}
    ).alarm_topic_arn
    assert load({"alarmTopicArn": "arn:aws-cn:sns:cn-north-1:123456789012:ops.fifo"}).alarm_topic_arn


def test_delivery_names_fit_their_limit_for_any_stack_name() -> None:
    """Delivery sources and destinations: ``[\\w-]``, 1-60 characters, unique in the account and region."""
    from contextual_kb.cdk import naming

    long_a, long_b = "A" * 100 + "-one", "A" * 100 + "-two"
    names = {naming.delivery_name(stack, "-kb-logs") for stack in (long_a, long_b, "ContextualKb")}
    assert len(names) == 3 and all(re.fullmatch(r"[\w-]{1,60}", n) for n in names), names
