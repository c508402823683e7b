"""The deferred workflow (``-c autoContextualize=...``, contextual_kb/cdk/deferred_workflow.py) in the
synthesized template: its state machine's failure policy, when it looks, least privilege per step, logs,
alarms, its own asset; cdk-nag (in synth) and cfn-lint clean; absent without the option."""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contextual_kb.cdk.deferred_workflow import ALARM_IDS
from tests.infra.conftest import as_list, cfn_lint, flat, resources, synth_variants, transform_function

VARIANTS = {
    "both": {"vectorStore": "s3vectors", "autoContextualize": "both"},
    "nightly": {"vectorStore": "s3vectors", "autoContextualize": "nightly", "kmsKey": True},
    "none": {"vectorStore": "s3vectors"},
}


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    return synth_variants(tmp_path_factory.mktemp("deferred"), VARIANTS)


def step_function(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (k, v) for k, v in resources(template, "AWS::Lambda::Function").items() if "DeferredStep" in k
    ]
    return found


def definition(template: dict[str, Any]) -> dict[str, Any]:
    (machine,) = resources(template, "AWS::StepFunctions::StateMachine").values()
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    partition = {"Ref": "AWS::Partition"}  # inside an ARN string (the item reader's)
    return json.loads(
        "".join(p if isinstance(p, str) else "aws" if p == partition else '"ARN"' for p in parts).replace(
            '""ARN""', '"ARN"'
        )
    )


def step_policy(template: dict[str, Any]) -> list[dict[str, Any]]:
    (policy,) = [
        p for k, p in resources(template, "AWS::IAM::Policy").items() if k.startswith("DeferredStepRole")
    ]
    return list(policy["Properties"]["PolicyDocument"]["Statement"])


def test_cfn_lint_finds_nothing_and_cdk_nag_passed_in_synth(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    linted = cfn_lint([path for path, _ in templates.values()])
    assert linted.returncode == 0, linted.stdout


def test_without_the_option_there_is_no_workflow(templates: dict[str, tuple[Path, dict[str, Any]]]) -> None:
    _, template = templates["none"]
    assert resources(template, "AWS::StepFunctions::StateMachine") == {}
    assert resources(template, "AWS::Scheduler::Schedule") == {}
    assert "ContextualizeStateMachineArn" not in template["Outputs"]


def test_one_look_retried_on_throttles_and_timeouts_then_a_dead_end(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    _, template = templates["both"]
    states = definition(template)["States"]
    look = states["Look"]
    assert look["Parameters"] == {"mode.$": "$.mode", "execution.$": "$$.Execution.Name"}
    retried = [r["ErrorEquals"] for r in look["Retry"]]
    assert "Lambda.TooManyRequestsException" in retried[0] and "States.Timeout" in retried[1]
    assert retried[-1] == ["States.ALL"] and all(r["MaxAttempts"] <= 6 for r in look["Retry"])
    (catch,) = look["Catch"]
    assert catch["ErrorEquals"] == ["States.ALL"] and states[catch["Next"]]["Type"] == "Fail"
    assert look["TimeoutSeconds"] > 900  # past the function's own 15 minutes: its timeout is the error
    assert "ContextualizeStateMachineArn" in template["Outputs"]


def test_it_looks_on_schedules_and_when_bedrock_says_a_batch_job_changed(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    for name, expected in (
        ("both", {("rate(30 minutes)", "resume"), ("cron(0 3 * * ? *)", "start"), ("rate(1 hour)", "start")}),
        ("nightly", {("rate(30 minutes)", "resume"), ("cron(0 3 * * ? *)", "start")}),
    ):
        _, template = templates[name]
        schedules = resources(template, "AWS::Scheduler::Schedule").values()
        found = {
            (s["Properties"]["ScheduleExpression"], json.loads(s["Properties"]["Target"]["Input"])["mode"])
            for s in schedules
        }
        assert found == expected, name
    _, template = templates["both"]
    (rule,) = resources(template, "AWS::Events::Rule").values()
    pattern = rule["Properties"]["EventPattern"]
    assert pattern == {
        "source": ["aws.bedrock"],
        "detail-type": ["Batch Inference Job State Change"],
        # only our jobs' ends (tests/infra/test_first_deploy.py matches events against it)
        "detail": {
            "batchJobName": [{"prefix": "ckb-"}],
            "status": [
                {"equals-ignore-case": status}
                for status in ("Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired")
            ],
        },
    }
    (target,) = rule["Properties"]["Targets"]
    assert json.loads(target["Input"]) == {"mode": "resume"}


def test_the_step_may_pass_only_the_batch_role_and_use_only_the_configured_model(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    _, template = templates["both"]
    statements = step_policy(template)
    (passing,) = [s for s in statements if "iam:PassRole" in as_list(s["Action"])]
    assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "bedrock.amazonaws.com"}}
    assert len(as_list(passing["Resource"])) == 1 and "BatchRole" in flat(passing["Resource"])
    for statement in statements:
        actions = as_list(statement["Action"])
        assert not any(a.endswith("*") for a in actions), actions
        if any(a in {"bedrock:InvokeModel", "bedrock:CreateModelInvocationJob"} for a in actions):
            models = [r for r in as_list(statement["Resource"]) if "model-invocation-job" not in flat(r)]
            assert models and all("claude-haiku-4-5" in flat(r) for r in models), statement
        for resource in as_list(statement["Resource"]):
            assert resource != "*", statement
    writes = [s for s in statements if "s3:DeleteObject" in as_list(s["Action"])]
    prefixes = {flat(r).split("/", 1)[1].split('"')[0] for s in writes for r in as_list(s["Resource"])}
    assert prefixes == {"contextual-kb/pending/*", "contextual-kb/batch/*", "contextual-kb/contexts/*"}
    source_writes = [s for s in statements if "s3:PutObject" in as_list(s["Action"]) and "Source" in flat(s)]
    assert [r for s in source_writes for r in as_list(s["Resource"])] and all(
        "*.metadata.json" in flat(s["Resource"]) for s in source_writes
    )


def test_its_logs_are_kept_a_month_and_deleted_with_the_stack_and_its_alarms_notify(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    _, template = templates["both"]
    groups = {k: v for k, v in resources(template, "AWS::Logs::LogGroup").items() if k.startswith("Deferred")}
    assert len(groups) == 2
    assert all(
        g["Properties"]["RetentionInDays"] == 30 and g["DeletionPolicy"] == "Delete" for g in groups.values()
    )
    (machine,) = resources(template, "AWS::StepFunctions::StateMachine").values()
    assert machine["Properties"]["LoggingConfiguration"]["Level"] == "ALL"
    alarms = {
        k: v["Properties"]
        for k, v in resources(template, "AWS::CloudWatch::Alarm").items()
        if "Deferred" in k
    }
    names = ("DeadEnd", "TimedOut", "RunStuck", "FailedRecords", "AboveFloor")
    by_name = {next(n for n in names if n in k): v for k, v in alarms.items()}
    assert len(by_name) == 5 == len(alarms)
    assert (
        by_name["RunStuck"]["Threshold"] == 30 * 3600 and by_name["RunStuck"]["MetricName"] == "RunAgeSeconds"
    )
    assert by_name["DeadEnd"]["MetricName"] == "ExecutionsFailed"
    assert by_name["AboveFloor"]["MetricName"] == "CostAboveFloorUsd"  # a plain metric (ministack: no math)
    assert all(a["AlarmActions"] and a["OKActions"] for a in alarms.values())
    runbook = (Path(__file__).resolve().parents[2] / "docs" / "OPERATIONS.md").read_text()
    for alarm_id in ALARM_IDS:
        (described,) = [a for k, a in alarms.items() if k.startswith(f"Deferred{alarm_id}")]
        assert described["AlarmDescription"].endswith(
            f" Runbook: docs/OPERATIONS.md#alarm-{alarm_id.lower()}"
        )
        assert f"\n### Alarm: {alarm_id}\n" in runbook


def test_the_step_has_its_own_asset_the_function_keeps_the_runtime_alone(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    from contextual_kb.cdk import bundling

    _, template = templates["both"]
    _, step = step_function(template)
    assert step["Properties"]["Handler"] == "contextual_kb.deferred.workflow.lambda_handler"
    folder, key = bundling.stage("arm64", parts=bundling.WORKFLOW_PARTS)
    runtime_folder, runtime_key = bundling.stage("arm64")
    assert key != runtime_key
    assert sorted(p.name for p in (folder / "contextual_kb").iterdir()) == [
        "__init__.py",
        "deferred",
        "py.typed",
        "query",
        "runtime",
    ]
    assert sorted(p.name for p in (runtime_folder / "contextual_kb").iterdir()) == [
        "__init__.py",
        "py.typed",
        "runtime",
    ]
    _, transform = transform_function(template)
    assert step["Properties"]["Code"]["S3Key"] != transform["Code"]["S3Key"]


def test_the_step_imports_nothing_outside_its_asset(tmp_path: Path) -> None:
    """What the handler imports, from the staged asset alone (the CLI's, the stand-ins' and the tests'
    packages refused): a module missing from the asset fails here, not in the deployed step."""
    from contextual_kb.cdk import bundling

    folder, _ = bundling.stage("arm64", parts=bundling.WORKFLOW_PARTS)
    script = """
import sys
for name in ("typer", "rich", "moto", "contextual_kb.cli", "contextual_kb.local", "contextual_kb.evaluation"):
    sys.modules[name] = None
import contextual_kb
assert contextual_kb.__file__.startswith(sys.argv[1]), contextual_kb.__file__
import contextual_kb.deferred.workflow, contextual_kb.deferred.services, contextual_kb.deferred.concurrency
import contextual_kb.query.aws_clients, contextual_kb.query.ingestion, contextual_kb.query.reprocess
import contextual_kb.runtime.context.claude.client
"""
    env = {**os.environ, "PYTHONPATH": str(folder)}
    done = subprocess.run(
        [sys.executable, "-c", script, str(folder)], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_auto_contextualize_is_refused_in_attach_mode_and_for_an_unknown_schedule() -> None:
    """Attach mode has no source bucket of the stack's to grant the re-ingestion's marks on: refused in one
    line at synth, never deployed without the workflow silently."""
    from contextual_kb.cdk.config import ConfigError, load

    attach = {
        "knowledgeBaseId": "ABCDEFGHIJ",
        "dataSourceId": "KLMNOPQRST",
        "knowledgeBaseRoleArn": "arn:aws:iam::123456789012:role/kb",
    }
    with pytest.raises(ConfigError, match=r"^CDK context: autoContextualize in attach mode"):
        load({**attach, "autoContextualize": "nightly"})
    with pytest.raises(ConfigError, match=r"^CDK context autoContextualize: "):
        load({"autoContextualize": "hourly"})
    assert load({"autoContextualize": "both"}).auto_contextualize == "both"


def test_the_schedules_and_the_rule_may_only_start_the_state_machine(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    _, template = templates["both"]
    (machine,) = resources(template, "AWS::StepFunctions::StateMachine")
    starters = [
        p["Properties"]["PolicyDocument"]["Statement"]
        for k, p in resources(template, "AWS::IAM::Policy").items()
        if k.startswith(("DeferredScheduleRole", "DeferredStateMachineEventsRole"))
    ]
    assert len(starters) == 2
    for statements in starters:
        assert statements == [
            {"Action": "states:StartExecution", "Effect": "Allow", "Resource": {"Ref": machine}}
        ]


def test_plan_and_store_fan_out_over_the_shards_in_distributed_maps(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """The look asks for a Map (outcome plan or store); each Map reads the run's manifest from S3 (the
    item reader: no list of shards in the payload) and runs each shard as a child execution invoking the
    step with the shard's action, retried like the look; results go to S3, not into the 256 KB payload;
    then a look again (resume)."""
    _, template = templates["both"]
    states = definition(template)["States"]
    choice = states[states["Look"]["Next"]]
    assert choice["Type"] == "Choice"
    fanned = {c["StringEquals"]: c["Next"] for c in choice["Choices"]}
    assert set(fanned) == {"plan", "store"} and states[choice["Default"]]["Type"] == "Succeed"
    for outcome, action in (("plan", "plan-shard"), ("store", "store-shard")):
        mapped = states[fanned[outcome]]
        assert mapped["Type"] == "Map"
        assert mapped["ItemProcessor"]["ProcessorConfig"] == {
            "Mode": "DISTRIBUTED",
            "ExecutionType": "STANDARD",
        }
        reader = mapped["ItemReader"]
        assert reader["Resource"].endswith(":s3:getObject") and reader["ReaderConfig"]["InputType"] == "JSON"
        assert reader["Parameters"]["Key.$"] == "$.manifest"
        assert 0 < mapped["MaxConcurrency"] <= 100 and "ItemBatcher" not in mapped  # a shard: one invocation
        assert reader["Parameters"]["Bucket.$"] == "$.bucket"
        # Each child's output is {}: thousands stay inside a state's 256 KB, with no ResultWriter to grant.
        assert "ResultWriter" not in mapped and mapped["ResultPath"] is None
        assert mapped["ItemSelector"]["action"] == action
        assert mapped["ItemSelector"]["run.$"] == "$$.Map.Item.Value.run"
        # The claim's owner from the look's result (the Map's input), not from a context object
        assert mapped["ItemSelector"]["execution.$"] == "$.execution"
        child = mapped["ItemProcessor"]["States"][mapped["ItemProcessor"]["StartAt"]]
        assert "Parameters" not in child and child["TimeoutSeconds"] > 900  # the item, as the event
        retried = [r["ErrorEquals"] for r in child["Retry"]]
        assert "Lambda.TooManyRequestsException" in retried[0] and "States.Timeout" in retried[1]
        # Throttles of 100 children at once: waited out longer, capped, with full jitter.
        throttled = child["Retry"][0]
        assert throttled["MaxAttempts"] >= 10 and throttled["MaxDelaySeconds"] == 60
        assert throttled["JitterStrategy"] == "FULL"
        assert mapped["ItemProcessor"]["States"][child["Next"]]["Result"] == {}
        (catch,) = mapped["Catch"]
        assert states[catch["Next"]]["Type"] == "Fail"
        again = states[mapped["Next"]]
        assert (
            again["Type"] == "Pass" and again["Parameters"] == {"mode": "resume"} and again["Next"] == "Look"
        )
    policies = [
        s
        for k, p in resources(template, "AWS::IAM::Policy").items()
        if k.startswith(("DeferredStateMachineRole", "DeferredStateMachineDistributedMapPolicy"))
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    # Child executions of itself, and the manifest read under the batch folder only.
    starts = [s for s in policies if "states:StartExecution" in as_list(s["Action"])]
    assert starts and all("Deferred" in flat(s["Resource"]) for s in starts)
    s3 = [s for s in policies if any(a.startswith("s3:") for a in as_list(s["Action"]))]
    assert s3 and all(
        "contextual-kb/batch/*/plan/manifest.json" in flat(r) for s in s3 for r in as_list(s["Resource"])
    )


def test_the_grants_name_the_folders_the_step_writes() -> None:
    """The construct's prefixes (its grants, the Maps' manifest read) are the ones the step's code uses: a
    drift would show only as AccessDenied in AWS."""
    import dataclasses

    from contextual_kb.cdk.deferred_workflow import MANIFESTS
    from contextual_kb.cdk.storage import BATCH_PREFIX, PENDING_PREFIX
    from contextual_kb.deferred.contextualize import Contextualizer, Options
    from contextual_kb.deferred.shards import manifest_key

    defaults = {f.name: f.default for f in dataclasses.fields(Options)}
    assert defaults["batch_prefix"] == BATCH_PREFIX and defaults["pending_prefix"] == PENDING_PREFIX
    contextualizer = Contextualizer.__new__(Contextualizer)
    contextualizer.options = Options(bucket="b", role_arn="r")
    manifest = manifest_key("run-1", contextualizer)
    assert fnmatch.fnmatchcase(manifest, MANIFESTS)
