"""A user's own CDK app (tests/user_apps/l1_app.py: L1 Knowledge Base, data source and role, plus
``ContextualTransformation``) through its lifecycle on ministack with the real CDK CLI: bootstrap, deploy,
invoke the deployed transformation function, update a setting, destroy. Ministack provisions no Bedrock or
OpenSearch Serverless resource: the Knowledge Base, its data source and the collection are left out by type
(tests/lifecycle/ministack.py); everything the construct adds is deployed."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextual_kb.local.bedrock_standin import BedrockStandIn, StandInConfig
from tests.lifecycle.ministack import ACCOUNT, REGION, Ministack, adapt_assembly, cdk
from tests.lifecycle.test_stack_lifecycle import EVENT, ROOT, _invoke

pytestmark = pytest.mark.lifecycle

STACK = "UserL1Kb"
APP = ROOT / "tests" / "user_apps" / "l1_app.py"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    executable = os.environ.get("MINISTACK")
    if not executable:
        pytest.skip("MINISTACK is not set: `make test-lifecycle` installs ministack and sets it")
    work = tmp_path_factory.mktemp("user-lifecycle")
    bedrock = BedrockStandIn(StandInConfig(latency_ms=0.0, per_token_ms=0.0)).start()
    ministack = Ministack(executable, work / "ministack")
    try:
        yield {"work": work, "bedrock": bedrock, "ministack": ministack}
    finally:
        ministack.stop()
        bedrock.stop()


def _assembly(engine: dict[str, Any], name: str, context: list[str]) -> Path:
    work: Path = engine["work"]
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
    environment["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"
    ran = cdk(
        ["--app", f"{sys.executable} {APP}", "synth", "-q", *context, "-o", str(work / name)],
        environment,
        work,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    adapt_assembly(
        work / name,
        work / f"{name}-ministack",
        STACK,
        attributes={},
        function_environment={"ANTHROPIC_BEDROCK_BASE_URL": engine["bedrock"].url},
    )
    return work / f"{name}-ministack"


def _deploy(engine: dict[str, Any], assembly: Path) -> None:
    ran = cdk(
        ["deploy", STACK, "--app", str(assembly), "--require-approval", "never"],
        engine["ministack"].environment(),
        engine["work"],
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-4000:]


def _resources(ministack: Ministack) -> dict[str, tuple[str, str]]:
    cloudformation = ministack.client("cloudformation")
    return {
        r["LogicalResourceId"]: (r["ResourceType"], r["PhysicalResourceId"])
        for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=STACK)
        for r in page["StackResourceSummaries"]
    }


def test_a_users_app_deploys_invokes_updates_and_destroys(engine: dict[str, Any]) -> None:
    ministack: Ministack = engine["ministack"]
    first = _assembly(engine, "first", [])
    second = _assembly(engine, "second", ["-c", "functionMemoryMb=2048"])
    ran = cdk(["bootstrap", f"aws://{ACCOUNT}/{REGION}"], ministack.environment(), engine["work"])
    assert ran.returncode == 0, ran.stderr[-3000:]

    _deploy(engine, first)
    deployed = _resources(ministack)
    (function,) = [
        p
        for k, (t, p) in deployed.items()
        if t == "AWS::Lambda::Function" and k.startswith("ContextualTransform")
    ]
    (bucket,) = [
        p
        for k, (t, p) in deployed.items()
        if t == "AWS::S3::Bucket" and k.startswith("ContextualStorageIntermediate")
    ]
    kinds = {t for t, _ in deployed.values()}
    for kind in (
        "AWS::IAM::Policy",
        "AWS::CloudWatch::Alarm",
        "AWS::CloudWatch::Dashboard",
        "AWS::SNS::Topic",
    ):
        assert kind in kinds, kind

    ran_once = _invoke(engine, function, bucket)
    given = json.loads(next((EVENT / "objects").rglob("*.JSON")).read_text())["fileContents"]
    assert len(ran_once["chunks"]) == len(given)
    for before, after in zip(given, ran_once["chunks"], strict=True):
        assert after["contentBody"].endswith(before["contentBody"])
        assert after["contentMetadata"]["ckb_context"]
    assert engine["bedrock"].stats.answered > 0

    _deploy(engine, second)  # a setting changed: the function updated in place
    lambda_ = ministack.client("lambda")
    assert lambda_.get_function_configuration(FunctionName=function)["MemorySize"] == 2048
    assert _invoke(engine, function, bucket)["chunks"]

    ran = cdk(["destroy", STACK, "--app", str(second), "--force"], ministack.environment(), engine["work"])
    assert ran.returncode == 0, ran.stderr[-3000:]
    functions = {f["FunctionName"] for f in lambda_.list_functions()["Functions"]}
    assert function not in functions
    buckets = {b["Name"] for b in ministack.client("s3").list_buckets()["Buckets"]}
    assert bucket in buckets  # the intermediate bucket is kept (remembered contexts)
