"""A first deploy in a real account (issue 51), in the synthesized templates: the state machine's logs under
``/aws/vendedlogs/states/`` (and the old group kept when an update renames it), the Scheduler role's trust
bound to this account, the Maps' concurrency a setting sized for a new account, the job-end rule matching
only the end of our own batch jobs (checked by EventBridge's own matcher, moto's), and attach mode's
ingestion-log delivery: a delivery source the Knowledge Base already has is looked for before one is made,
or used."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from contextual_kb.cdk.config import MAP_CONCURRENCY, ConfigError, load
from contextual_kb.cdk.deferred_workflow import JOB_ENDED, JOB_NAME_PREFIX
from tests.infra.conftest import as_list, cfn_lint, flat, resources, synth_variants
from tests.infra.replacement import name_collisions, replaced

ROLE = "arn:aws:iam::123456789012:role/service-role/AmazonBedrockExecutionRoleForKnowledgeBase_x1"
ATTACH = {"knowledgeBaseId": "KBEXIST001", "dataSourceId": "DSEXIST001", "knowledgeBaseRoleArn": ROLE}
WORKFLOW = {"vectorStore": "s3vectors", "autoContextualize": "both"}
VARIANTS = {
    "both": WORKFLOW,  # the same context as tests/infra/test_deferred_workflow.py's: synthesized once
    "wide": {**WORKFLOW, "workflowMapConcurrency": 40},
    "reserved": {**WORKFLOW, "workflowReservedConcurrency": 20},
    "attach": ATTACH,
    "attach-their-source": {**ATTACH, "ingestionLogSource": "kb-logs-from-the-console"},
    "attach-no-logs": {**ATTACH, "ingestionLogs": False},
}
# The statuses GetModelInvocationJob documents; those a job ends in are JOB_ENDED.
UNDER_WAY = ("Submitted", "Validating", "Scheduled", "InProgress", "Stopping")


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    return synth_variants(tmp_path_factory.mktemp("first-deploy"), VARIANTS)


def test_every_variant_passes_cfn_lint(templates: dict[str, tuple[Path, dict[str, Any]]]) -> None:
    linted = cfn_lint([path for path, _ in templates.values()])
    assert linted.returncode == 0, linted.stdout + linted.stderr


# --- 1. the state machine's log group -------------------------------------------------------------


def machine_log_group(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    (machine,) = resources(template, "AWS::StepFunctions::StateMachine").values()
    (destination,) = machine["Properties"]["LoggingConfiguration"]["Destinations"]
    logical = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
    return logical, template["Resources"][logical]


def test_the_state_machines_logs_are_under_vendedlogs_states(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """Step Functions' logging best practices (bp-cwl.html): a group without the prefix is added to CloudWatch
    Logs' resource policy (5,120 characters at most); near that, CreateStateMachine fails with
    InvalidLoggingConfiguration. Named by the stack, kept a month, deleted with the stack."""
    _, template = templates["both"]
    _, group = machine_log_group(template)
    name = group["Properties"]["LogGroupName"]
    assert isinstance(name, str) and name.startswith("/aws/vendedlogs/states/ContextualKb-Deferred-"), name
    assert len(name) <= 512 and all(c.isalnum() or c in "._-/#" for c in name)
    assert group["Properties"]["RetentionInDays"] == 30 and group["DeletionPolicy"] == "Delete"


def test_an_update_that_renames_the_group_keeps_the_old_one_and_its_logs(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """A stack deployed before had a group CloudFormation named (no LogGroupName): the name is create-only, so
    the update replaces the group; its UpdateReplacePolicy (Retain) keeps the old group, whose logs expire
    under its month, instead of deleting them. Nothing else is replaced, and no name collides."""
    _, after = templates["both"]
    logical, group = machine_log_group(after)
    assert group["UpdateReplacePolicy"] == "Retain"
    before = copy.deepcopy(after)
    del before["Resources"][logical]["Properties"]["LogGroupName"]
    before["Resources"][logical]["UpdateReplacePolicy"] = "Delete"  # today's: month_of_logs's DESTROY
    assert replaced(before, after) == {logical: "LogGroupName changed"}
    assert name_collisions(before, after) == {}


# --- 3. the Scheduler role's trust ----------------------------------------------------------------


def test_the_scheduler_role_trusts_scheduler_only_for_this_account(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """The confused-deputy guidance: aws:SourceAccount (not aws:SourceArn on the schedules: Scheduler checks
    the trust at CreateSchedule, before the schedule exists)."""
    _, template = templates["both"]
    (role,) = [
        r for k, r in resources(template, "AWS::IAM::Role").items() if k.startswith("DeferredScheduleRole")
    ]
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert statement["Action"] == "sts:AssumeRole" and statement["Effect"] == "Allow"
    assert statement["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}


# --- 4. the Maps' concurrency ---------------------------------------------------------------------


def map_concurrencies(template: dict[str, Any]) -> list[int]:
    from tests.infra.test_deferred_workflow import definition

    states = definition(template)["States"]
    return [s["MaxConcurrency"] for s in states.values() if s["Type"] == "Map"]


def step(template: dict[str, Any]) -> dict[str, Any]:
    (found,) = [v for k, v in resources(template, "AWS::Lambda::Function").items() if "DeferredStep" in k]
    return found["Properties"]


def test_the_maps_run_what_a_new_account_runs_unless_told(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """New accounts have reduced Lambda concurrency (Lambda quotas page); 100 children throttled, retried,
    failed the Map. The default is 5; a setting widens it; the step's reserved concurrency sizes it."""
    assert MAP_CONCURRENCY == 5
    assert map_concurrencies(templates["both"][1]) == [5, 5]
    assert "ReservedConcurrentExecutions" not in step(templates["both"][1])
    assert map_concurrencies(templates["wide"][1]) == [40, 40]
    assert map_concurrencies(templates["reserved"][1]) == [19, 19]
    assert step(templates["reserved"][1])["ReservedConcurrentExecutions"] == 20


@pytest.mark.parametrize(
    ("context", "message"),
    [
        (
            {**WORKFLOW, "workflowMapConcurrency": 30, "workflowReservedConcurrency": 20},
            "workflowMapConcurrency=30 with workflowReservedConcurrency=20: the children would throttle on "
            "the step's own reserved concurrency; use at most 19",
        ),
        ({"workflowMapConcurrency": 10}, "workflowMapConcurrency applies only with autoContextualize"),
        (
            {"workflowReservedConcurrency": 10},
            "workflowReservedConcurrency applies only with autoContextualize",
        ),
        ({**WORKFLOW, "workflowReservedConcurrency": 1}, "workflowReservedConcurrency: "),
        ({**WORKFLOW, "workflowMapConcurrency": 0}, "workflowMapConcurrency: "),
        ({**WORKFLOW, "workflowMapConcurrency": 10001}, "workflowMapConcurrency: "),
    ],
)
def test_concurrency_settings_that_cannot_work_fail_synth_in_one_line(
    context: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load(context)
    assert message in str(raised.value) and "\n" not in str(raised.value)


# --- 5. the job-end rule --------------------------------------------------------------------------


def job_event(name: str, status: str) -> dict[str, Any]:
    """An event shaped as the sample on "How EventBridge for Amazon Bedrock works" (Batch Inference Job State
    Change)."""
    arn = "arn:aws:bedrock:us-east-1:123456789012:model-invocation-job/abcdefghwxyz"
    return {
        "version": "0",
        "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
        "detail-type": "Batch Inference Job State Change",
        "source": "aws.bedrock",
        "account": "123456789012",
        "time": "2026-12-06T12:34:56Z",
        "region": "us-east-1",
        "resources": [arn],
        "detail": {
            "version": "0.0",
            "accountId": "123456789012",
            "batchJobName": name,
            "batchJobArn": arn,
            "batchModelId": "anthropic.claude-haiku-4-5-20251001-v1:0",
            "status": status,
            "failureMessage": "",
            "processedRecordCount": 100,
            "successRecordCount": 100,
            "errorRecordCount": 0,
        },
    }


def test_the_rule_starts_a_look_only_when_one_of_our_jobs_ends(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """Not every state change of every batch job in the account: EventBridge's matching as moto implements
    it (its EventPattern, which routes its PutEvents; its TestEventPattern API is not implemented) takes, on
    the deployed pattern, our job's terminal statuses and nothing else. The lifecycle test asks ministack's
    TestEventPattern the same of the jobs a run created there."""
    from moto.events.models import EventPattern, EventPatternParser

    _, template = templates["both"]
    (rule,) = resources(template, "AWS::Events::Rule").values()
    pattern = rule["Properties"]["EventPattern"]
    assert pattern["source"] == ["aws.bedrock"]
    assert pattern["detail-type"] == ["Batch Inference Job State Change"]
    raw = json.dumps(pattern)
    matcher = EventPattern(raw, EventPatternParser(raw).parse())
    ours = f"{JOB_NAME_PREFIX}20261206-120000-ab12cd-1"

    def matches(name: str, status: str) -> bool:
        return matcher.matches_event(job_event(name, status))  # type: ignore[arg-type]

    assert all(matches(ours, status) for status in JOB_ENDED)
    assert not any(matches(ours, status) for status in UNDER_WAY)
    # The page's sample shows only "Completed"; the other ends are GetModelInvocationJob's values, so their
    # capitalisation in the event is an inference: matched ignoring case, a differently cased end still wakes.
    assert all(matches(ours, status.upper()) and matches(ours, status.lower()) for status in JOB_ENDED)
    assert not any(matches(ours, status.upper()) for status in UNDER_WAY)
    assert not any(matches(name, "Completed") for name in ("my-batch-job", "nightly-ckb-1", "CKB-x-1"))


def test_the_rules_statuses_are_the_ones_the_workflow_treats_as_ended() -> None:
    from contextual_kb.deferred.contextualize import ENDED

    assert set(JOB_ENDED) == set(ENDED)


# --- 2. attach mode's ingestion-log delivery ------------------------------------------------------


def inspection(template: dict[str, Any]) -> dict[str, Any]:
    (found,) = resources(template, "Custom::DataSourceInspection").values()
    return found["Properties"]


def test_the_inspection_looks_for_the_knowledge_bases_delivery_source_before_one_is_made(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """CloudWatch Logs allows one delivery source a resource and log type: the inspection (which runs before
    the stack's source is made) is told the source the stack makes, may list the account's sources, and says
    what it found as an output (ckb doctor reads it)."""
    _, template = templates["attach"]
    properties = inspection(template)
    (source,) = resources(template, "AWS::Logs::DeliverySource").values()
    assert properties["IngestionLogs"] == "create"
    assert properties["IngestionLogSource"] == source["Properties"]["Name"]
    (logical,) = [k for k, v in template["Resources"].items() if v["Type"] == "Custom::DataSourceInspection"]
    assert logical in as_list(source.get("DependsOn", [])) or logical in flat(
        [template["Resources"][d].get("DependsOn", []) for d in as_list(source.get("DependsOn", []))]
    )
    statements = [
        s
        for k, p in resources(template, "AWS::IAM::Policy").items()
        if k.startswith("AttachRole")
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    (listing,) = [s for s in statements if "logs:DescribeDeliverySources" in as_list(s["Action"])]
    assert as_list(listing["Action"]) == ["logs:DescribeDeliverySources"] and listing["Resource"] == "*"
    assert "IngestionLogsCheck" in flat(template["Outputs"]["IngestionLogsCheck"])


def test_a_source_the_knowledge_base_has_is_used_not_made_again(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """``ingestionLogSource``: no source is made; the stack's delivery goes from that one (a source may have
    several deliveries) to the stack's log group, and destroy leaves the source as it was."""
    _, template = templates["attach-their-source"]
    assert resources(template, "AWS::Logs::DeliverySource") == {}
    (delivery,) = resources(template, "AWS::Logs::Delivery").values()
    assert delivery["Properties"]["DeliverySourceName"] == "kb-logs-from-the-console"
    assert inspection(template)["IngestionLogs"] == "use"
    assert inspection(template)["IngestionLogSource"] == "kb-logs-from-the-console"
    _, template = templates["attach-no-logs"]
    assert resources(template, "AWS::Logs::Delivery") == {}
    assert inspection(template)["IngestionLogs"] == "off"


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"ingestionLogSource": "console-source"}, "ingestionLogSource applies only when attaching"),
        (
            {**ATTACH, "ingestionLogSource": "console-source", "ingestionLogs": False},
            "ingestionLogSource with ingestionLogs=false",
        ),
        ({**ATTACH, "ingestionLogSource": "no spaces"}, "ingestionLogSource: "),
    ],
)
def test_ingestion_log_settings_that_cannot_work_fail_synth_in_one_line(
    context: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load(context)
    assert message in str(raised.value) and "\n" not in str(raised.value)
