"""Users' own CDK apps as a user runs them, through their lifecycle on ministack. The wheel (built once a
session, tests/packaging/wheel.py) is installed with its ``cdk`` extra in a fresh venv outside the checkout;
in a temporary folder, each app (tests/user_apps/alpha_app.py: the alpha ``KnowledgeBase``, an L1
``CfnDataSource``, the Mixin and a grant to the Knowledge Base; l1_app.py: all L1, the value form and a grant
to the role) is synthesized by the pinned CDK CLI with that venv's Python, then deployed, its transformation
function invoked on the sample event, a setting updated (in place), destroyed, and what is left checked.

Left out (tests/lifecycle/ministack.py: ministack provisions no Bedrock or OpenSearch Serverless resource):
the user's Knowledge Base, data source and collection, in both apps; a reference to one is a placeholder.
The alpha L2 adds no resource of another type (no custom resource: the collection is given as a
``CfnCollection``), so its role and policy, with our grant in it, are deployed; so is everything the
construct adds. The function's asset is rebuilt for this machine by the installed package's bundling, and
its code checked equal to the synthesized asset's."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextual_kb.local.bedrock_standin import BedrockStandIn, StandInConfig
from tests.lifecycle.ministack import ACCOUNT, REGION, Ministack, adapt_assembly, cdk
from tests.lifecycle.test_stack_lifecycle import EVENT, ROOT, _invoke
from tests.packaging.wheel import installed_package, run_outside, synth

pytestmark = pytest.mark.lifecycle

APPS = {"alpha_app": "UserKb", "l1_app": "UserL1Kb"}
USER_APPS = ROOT / "tests" / "user_apps"
LEFT_OUT = {
    "AWS::Bedrock::KnowledgeBase",
    "AWS::Bedrock::DataSource",
    "AWS::OpenSearchServerless::Collection",
}
# What the construct adds (the grant's policy is the user's role's).
ADDED = {
    "AWS::IAM::Role",
    "AWS::IAM::Policy",
    "AWS::Lambda::Function",
    "AWS::Logs::LogGroup",
    "AWS::S3::Bucket",
    "AWS::S3::BucketPolicy",
    "AWS::SNS::Topic",
    "AWS::SNS::TopicPolicy",
    "AWS::CloudWatch::Alarm",
    "AWS::CloudWatch::Dashboard",
}
# The installed package's bundling, run by the venv's Python from the user's folder.
REBUILD = (
    "import sys; from pathlib import Path; from contextual_kb.cdk import bundling; "
    "parts = bundling.WORKFLOW_PARTS if sys.argv[3] == 'step' else bundling.RUNTIME_PARTS; "
    "bundling.build(Path(sys.argv[1]), sys.argv[2], parts=parts)"
)


@pytest.fixture(scope="module")
def engine(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, Any]]:
    executable = os.environ.get("MINISTACK")
    if not executable:
        pytest.skip("MINISTACK is not set: `make test-lifecycle` installs ministack and sets it")
    venv: Path = request.getfixturevalue("wheel_cdk_venv")  # built only where it runs
    work = tmp_path_factory.mktemp("user-apps")  # the user's folder: their apps, run from here
    installed_package(venv, work)  # the venv's own contextual_kb, never the checkout's
    bedrock = BedrockStandIn(StandInConfig(latency_ms=0.0, per_token_ms=0.0)).start()
    ministack = Ministack(executable, work / "ministack")
    try:
        ran = cdk(["bootstrap", f"aws://{ACCOUNT}/{REGION}"], ministack.environment(), work)
        assert ran.returncode == 0, ran.stderr[-3000:]
        yield {"work": work, "venv": venv, "bedrock": bedrock, "ministack": ministack}
    finally:
        ministack.stop()
        bedrock.stop()


def _rebuild(engine: dict[str, Any], asset: Path, architecture: str, step: bool) -> None:
    ran = run_outside(
        engine["venv"], "python", "-c", REBUILD, str(asset), architecture, "step" if step else "function",
        cwd=engine["work"],
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]


def _assembly(engine: dict[str, Any], name: str, label: str, context: list[str]) -> tuple[Path, list[str]]:
    """The app synthesized from the installed wheel in the user's folder, adapted to ministack."""
    work: Path = engine["work"]
    app = work / f"{name}.py"
    shutil.copy(USER_APPS / f"{name}.py", app)
    out = synth(engine["venv"], app, work, f"{name}-{label}", *context)
    target = work / f"{name}-{label}-ministack"
    removed = adapt_assembly(
        out,
        target,
        APPS[name],
        attributes={},
        function_environment={"ANTHROPIC_BEDROCK_BASE_URL": engine["bedrock"].url},
        rebuild=lambda asset, architecture, step: _rebuild(engine, asset, architecture, step),
    )
    template = json.loads((out / f"{APPS[name]}.template.json").read_text())
    assert {template["Resources"][r]["Type"] for r in removed} == LEFT_OUT
    return target, removed


def _deploy(engine: dict[str, Any], stack: str, assembly: Path) -> str:
    ran = cdk(
        ["deploy", stack, "--app", str(assembly), "--require-approval", "never"],
        engine["ministack"].environment(),
        engine["work"],
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-4000:]
    (described,) = engine["ministack"].client("cloudformation").describe_stacks(StackName=stack)["Stacks"]
    return str(described["StackStatus"])


def _resources(ministack: Ministack, stack: str) -> dict[str, tuple[str, str]]:
    cloudformation = ministack.client("cloudformation")
    return {
        r["LogicalResourceId"]: (r["ResourceType"], r["PhysicalResourceId"])
        for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack)
        for r in page["StackResourceSummaries"]
    }


def _one(deployed: dict[str, tuple[str, str]], kind: str, prefix: str) -> str:
    (physical,) = [p for k, (t, p) in deployed.items() if t == kind and k.startswith(prefix)]
    return physical


def _granted(ministack: Ministack, role: str, function_arn: str) -> bool:
    """The role's policies let it invoke the function (the grant, as the engine holds it)."""
    iam = ministack.client("iam")
    for name in iam.list_role_policies(RoleName=role)["PolicyNames"]:
        document = iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
        document = json.loads(document) if isinstance(document, str) else document
        for statement in document["Statement"]:
            actions, resources = (
                value if isinstance(value, list) else [value]
                for value in (statement["Action"], statement["Resource"])
            )
            if "lambda:InvokeFunction" in actions and function_arn in resources:
                return True
    return False


def _live(ministack: Ministack) -> dict[str, set[str]]:
    """What exists in the engine, by type, as physical ids."""
    cloudwatch = ministack.client("cloudwatch")
    return {
        "AWS::Lambda::Function": {
            f["FunctionName"] for f in ministack.client("lambda").list_functions()["Functions"]
        },
        "AWS::IAM::Role": {r["RoleName"] for r in ministack.client("iam").list_roles()["Roles"]},
        "AWS::Logs::LogGroup": {
            g["logGroupName"] for g in ministack.client("logs").describe_log_groups()["logGroups"]
        },
        "AWS::SNS::Topic": {t["TopicArn"] for t in ministack.client("sns").list_topics()["Topics"]},
        "AWS::CloudWatch::Alarm": {a["AlarmName"] for a in cloudwatch.describe_alarms()["MetricAlarms"]},
        "AWS::CloudWatch::Dashboard": {
            d["DashboardName"] for d in cloudwatch.list_dashboards()["DashboardEntries"]
        },
        "AWS::S3::Bucket": {b["Name"] for b in ministack.client("s3").list_buckets()["Buckets"]},
    }


def _every_chunk_back_with_a_context(chunks: list[dict[str, Any]]) -> None:
    given = json.loads(next((EVENT / "objects").rglob("*.JSON")).read_text())["fileContents"]
    assert len(chunks) == len(given)
    for before, after in zip(given, chunks, strict=True):
        assert after["contentBody"].endswith(before["contentBody"])
        assert after["contentMetadata"]["ckb_context"]


@pytest.mark.parametrize("name", list(APPS))
def test_a_users_app_from_the_wheel_deploys_invokes_updates_and_destroys(
    engine: dict[str, Any], name: str
) -> None:
    ministack: Ministack = engine["ministack"]
    stack = APPS[name]
    first, _ = _assembly(engine, name, "first", [])
    second, _ = _assembly(engine, name, "second", ["-c", "functionMemoryMb=2048"])

    assert _deploy(engine, stack, first) == "CREATE_COMPLETE"
    deployed = _resources(ministack, stack)
    template = json.loads((first / f"{stack}.template.json").read_text())["Resources"]
    # Everything but what is left out is deployed: the construct's parts, the user's role with our grant.
    assert set(template) - {"CDKMetadata"} <= set(deployed), set(template) - set(deployed)
    assert {t for t, _ in deployed.values()} >= ADDED
    function = _one(deployed, "AWS::Lambda::Function", "ContextualTransformFunction")
    bucket = _one(deployed, "AWS::S3::Bucket", "ContextualStorageIntermediate")
    lambda_ = ministack.client("lambda")
    function_arn = lambda_.get_function_configuration(FunctionName=function)["FunctionArn"]
    assert _granted(ministack, _one(deployed, "AWS::IAM::Role", "KbRole"), function_arn)

    answered = engine["bedrock"].stats.answered  # the stand-in is shared by both apps
    _every_chunk_back_with_a_context(_invoke(engine, function, bucket)["chunks"])
    assert engine["bedrock"].stats.answered > answered  # the contexts came from the (stand-in) model

    # A setting changed: the same function, updated in place; the contexts are remembered in the bucket.
    answered = engine["bedrock"].stats.answered
    assert _deploy(engine, stack, second) == "UPDATE_COMPLETE"
    assert _resources(ministack, stack) == deployed
    assert lambda_.get_function_configuration(FunctionName=function)["MemorySize"] == 2048
    _every_chunk_back_with_a_context(_invoke(engine, function, bucket)["chunks"])
    assert engine["bedrock"].stats.answered == answered  # remembered across the update: no model call

    # Destroy: what the template keeps (DeletionPolicy Retain: the buckets) stays, everything else goes.
    ran = cdk(["destroy", stack, "--app", str(second), "--force"], ministack.environment(), engine["work"])
    assert ran.returncode == 0, ran.stderr[-3000:]
    stacks = ministack.client("cloudformation").list_stacks()["StackSummaries"]
    assert all(s["StackStatus"] == "DELETE_COMPLETE" for s in stacks if s["StackName"] == stack)
    live = _live(ministack)
    kept = {logical for logical, r in template.items() if r.get("DeletionPolicy") == "Retain"}
    for logical, (kind, physical) in deployed.items():
        if kind not in live:
            continue
        if logical in kept:
            assert physical in live[kind], (logical, "kept by its DeletionPolicy, but gone")
        else:
            assert physical not in live[kind], (logical, kind, "left behind by destroy")
    assert function not in live["AWS::Lambda::Function"]
    assert bucket in live["AWS::S3::Bucket"]  # the intermediate bucket is kept (remembered contexts)
