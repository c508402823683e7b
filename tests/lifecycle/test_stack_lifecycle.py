"""The stack's lifecycle on a real CloudFormation engine (ministack), with the real CDK CLI: bootstrap,
deploy, invoke the deployed transformation function, update a setting, destroy, and what is left after.

`make test-lifecycle` runs it (CI does): ministack in a venv of its own (``MINISTACK`` names its executable).
What ministack cannot provision (Bedrock, OpenSearch Serverless, S3 Vectors) is left out by type, and the
index's custom resource creates the index on our OpenSearch stand-in (tests/lifecycle/ministack.py says
where ministack differs from AWS).
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextual_kb.local.bedrock_standin import BedrockStandIn, StandInConfig
from contextual_kb.local.opensearch_standin import OpenSearchStandIn
from tests.lifecycle.ministack import (
    ACCOUNT,
    REGION,
    SECRET,
    Ministack,
    adapt_assembly,
    cdk,
    invocation_failure,
)

pytestmark = pytest.mark.lifecycle

ROOT = Path(__file__).resolve().parents[2]
STACK = "ContextualKb"
EVENT = ROOT / "events" / "markdown"
EMAIL = "oncall@example.com"
FIRST = ["-c", "vectorStore=opensearch", "-c", f"alarmEmail={EMAIL}"]
# The update: the function's memory, and a new index dimension (a new index body: the index is replaced).
SECOND = [*FIRST, "-c", "functionMemoryMb=2048", "-c", "embeddingDimension=512"]
LEFT_OUT = {
    "AWS::Bedrock::KnowledgeBase",
    "AWS::Bedrock::DataSource",
    "AWS::OpenSearchServerless::Collection",
    "AWS::OpenSearchServerless::SecurityPolicy",
    "AWS::OpenSearchServerless::AccessPolicy",
    # The Knowledge Base's ingestion logs: their log group, metric filter and alarm are deployed.
    "AWS::Logs::DeliverySource",
    "AWS::Logs::DeliveryDestination",
    "AWS::Logs::Delivery",
}


def _synth(out: Path, context: list[str]) -> None:
    """As `make synth` runs it: the pinned CLI, the shipped cdk.json, this venv's Python."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
    environment["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"
    ran = cdk(
        ["--app", f"{sys.executable} app.py", "synth", "-q", *context, "-o", str(out)], environment, ROOT
    )
    assert ran.returncode == 0, ran.stderr[-3000:]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    executable = os.environ.get("MINISTACK")
    if not executable:
        pytest.skip("MINISTACK is not set: `make test-lifecycle` installs ministack and sets it")
    work = tmp_path_factory.mktemp("lifecycle")
    opensearch = OpenSearchStandIn(access_key=ACCOUNT, secret_key=SECRET).start()
    bedrock = BedrockStandIn(StandInConfig(latency_ms=0.0, per_token_ms=0.0)).start()
    ministack = Ministack(executable, work / "ministack")
    try:
        yield {"work": work, "opensearch": opensearch, "bedrock": bedrock, "ministack": ministack}
    finally:
        ministack.stop()
        bedrock.stop()
        opensearch.stop()


def _assembly(engine: dict[str, Any], name: str, context: list[str]) -> tuple[Path, list[str]]:
    work: Path = engine["work"]
    _synth(work / name, context)
    removed = adapt_assembly(
        work / name,
        work / f"{name}-ministack",
        STACK,
        attributes={("VectorStoreCollection", "CollectionEndpoint"): engine["opensearch"].url},
        function_environment={"ANTHROPIC_BEDROCK_BASE_URL": engine["bedrock"].url},
    )
    return work / f"{name}-ministack", removed


def _deploy(engine: dict[str, Any], assembly: Path) -> dict[str, str]:
    work: Path = engine["work"]
    outputs = work / "outputs.json"
    ran = cdk(
        [
            "deploy",
            STACK,
            "--app",
            str(assembly),
            "--require-approval",
            "never",
            "--outputs-file",
            str(outputs),
        ],
        engine["ministack"].environment(),
        work,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-4000:]
    return dict(json.loads(outputs.read_text())[STACK])


def _stack_resources(cloudformation: Any) -> dict[str, tuple[str, str]]:
    found = {}
    for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=STACK):
        for resource in page["StackResourceSummaries"]:
            found[resource["LogicalResourceId"]] = (resource["ResourceType"], resource["PhysicalResourceId"])
    return found


def _invoke(engine: dict[str, Any], function: str, bucket: str) -> dict[str, Any]:
    """The sample Knowledge Base event on the deployed function, its batch in the deployed bucket."""
    s3 = engine["ministack"].client("s3")
    for path in (EVENT / "objects").rglob("*"):
        if path.is_file():
            s3.put_object(
                Bucket=bucket, Key=path.relative_to(EVENT / "objects").as_posix(), Body=path.read_bytes()
            )
    event = {**json.loads((EVENT / "event.json").read_text()), "bucketName": bucket}
    reply = (
        engine["ministack"]
        .client("lambda")
        .invoke(FunctionName=function, Payload=json.dumps(event).encode(), LogType="Tail")
    )
    log = base64.b64decode(reply.get("LogResult", "")).decode(errors="replace")
    payload = reply["Payload"].read()
    if reply["StatusCode"] != 200 or "FunctionError" in reply:
        engine_log = engine["ministack"].log_path.read_text(errors="replace")
        pytest.fail(invocation_failure(reply, payload, engine_log), pytrace=False)
    response = json.loads(payload)
    chunks = [
        item
        for output in response["outputFiles"]
        for batch in output["contentBatches"]
        for item in json.loads(s3.get_object(Bucket=bucket, Key=batch["key"])["Body"].read())["fileContents"]
    ]
    return {"response": response, "chunks": chunks, "log": log}


def _alarms_reach_the_topic(ministack: Ministack, outputs: dict[str, str]) -> None:
    """Every alarm notifies the topic (its ARN an output) when it fires and when it clears; the address is
    subscribed to it; the Knowledge Base's failed documents are counted in the ingestion log group."""
    topic = outputs["AlarmTopicArn"]
    alarms = ministack.client("cloudwatch").describe_alarms()["MetricAlarms"]
    ours = [a for a in alarms if a["AlarmName"].startswith(f"{STACK}-")]
    assert len(ours) == 7, [a["AlarmName"] for a in alarms]  # ModelTokensNearQuota too
    assert all(a["AlarmActions"] == [topic] and a["OKActions"] == [topic] for a in ours)
    subscriptions = ministack.client("sns").list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert [(s["Protocol"], s["Endpoint"]) for s in subscriptions] == [("email", EMAIL)]
    logs = ministack.client("logs")
    (metric_filter,) = logs.describe_metric_filters(logGroupName=outputs["IngestionLogGroupName"])[
        "metricFilters"
    ]
    assert metric_filter["metricTransformations"][0]["metricName"] == "IngestionDocumentsFailed"


def test_bootstrap_deploy_invoke_update_and_destroy(engine: dict[str, Any]) -> None:
    ministack: Ministack = engine["ministack"]
    opensearch: OpenSearchStandIn = engine["opensearch"]
    first, removed = _assembly(engine, "first", FIRST)
    second, _ = _assembly(engine, "second", SECOND)
    # Only the types ministack cannot provision are left out.
    template = json.loads((engine["work"] / "first" / f"{STACK}.template.json").read_text())
    assert {template["Resources"][r]["Type"] for r in removed} == LEFT_OUT

    ran = cdk(["bootstrap", f"aws://{ACCOUNT}/{REGION}"], ministack.environment(), engine["work"])
    assert ran.returncode == 0, ran.stderr[-3000:]

    # Deploy: the custom resource made the index, signed requests only.
    outputs = _deploy(engine, first)
    cloudformation = ministack.client("cloudformation")
    (stack,) = cloudformation.describe_stacks(StackName=STACK)["Stacks"]
    assert stack["StackStatus"] == "CREATE_COMPLETE"
    first_index = next(iter(opensearch.indexes))
    assert list(opensearch.indexes) == [first_index] and opensearch.bad_signatures == 0
    deployed = _stack_resources(cloudformation)
    kinds = {kind for kind, _ in deployed.values()}
    for kind in ("AWS::S3::Bucket", "AWS::S3::BucketPolicy", "AWS::IAM::Role", "AWS::Lambda::Function",
                 "AWS::Logs::LogGroup", "AWS::CloudWatch::Alarm", "AWS::CloudWatch::Dashboard",
                 "Custom::OpenSearchIndex", "AWS::SNS::Topic", "AWS::SNS::TopicPolicy",
                 "AWS::SNS::Subscription", "AWS::Logs::MetricFilter"):  # fmt: skip
        assert kind in kinds, kind
    _alarms_reach_the_topic(ministack, outputs)

    # The deployed function, from its deployed asset, on a sample event: every chunk back, with a context.
    function = outputs["TransformFunctionName"]
    ran_once = _invoke(engine, function, outputs["IntermediateBucketName"])
    given = json.loads(next((EVENT / "objects").rglob("*.JSON")).read_text())["fileContents"]
    assert len(ran_once["chunks"]) == len(given)
    for before, after in zip(given, ran_once["chunks"], strict=True):
        assert after["contentBody"].endswith(before["contentBody"])
        assert after["contentMetadata"]["ckb_context"]
    assert engine["bedrock"].stats.answered > 0  # the model contexts came from the (stand-in) model
    lambda_ = ministack.client("lambda")
    assert (
        lambda_.get_function_configuration(FunctionName=function)["Environment"]["Variables"]["VECTOR_STORE"]
        == "opensearch"
    )

    # Update a setting: the function changes in place; a new index body replaces the index.
    _deploy(engine, second)
    (stack,) = cloudformation.describe_stacks(StackName=STACK)["Stacks"]
    assert stack["StackStatus"] == "UPDATE_COMPLETE"
    assert lambda_.get_function_configuration(FunctionName=function)["MemorySize"] == 2048
    assert first_index not in opensearch.indexes and len(opensearch.indexes) == 1
    assert _invoke(engine, function, outputs["IntermediateBucketName"])["chunks"]

    # Destroy: what is kept and what goes.
    before = _stack_resources(cloudformation)
    ran = cdk(["destroy", STACK, "--app", str(second), "--force"], ministack.environment(), engine["work"])
    assert ran.returncode == 0, ran.stderr[-3000:]
    stacks = cloudformation.list_stacks()["StackSummaries"]
    assert all(s["StackStatus"] == "DELETE_COMPLETE" for s in stacks if s["StackName"] == STACK)
    assert not opensearch.indexes  # the custom resource deleted the index
    s3, logs = ministack.client("s3"), ministack.client("logs")
    buckets = {b["Name"] for b in s3.list_buckets()["Buckets"]}
    groups = {g["logGroupName"] for g in logs.describe_log_groups()["logGroups"]}
    functions = {f["FunctionName"] for f in lambda_.list_functions()["Functions"]}
    roles = {r["RoleName"] for r in ministack.client("iam").list_roles()["Roles"]}
    kept_buckets = [physical for kind, physical in before.values() if kind == "AWS::S3::Bucket"]
    assert len(kept_buckets) == 3 and set(kept_buckets) <= buckets  # documents, contexts, access logs
    for bucket in kept_buckets:  # their policies too: TLS only, log delivery
        policy = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])
        assert any(s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
                   for s in policy["Statement"])  # fmt: skip
    for kind, live in (
        ("AWS::Logs::LogGroup", groups),
        ("AWS::Lambda::Function", functions),
        ("AWS::IAM::Role", roles),
        ("AWS::SNS::Topic", {t["TopicArn"] for t in ministack.client("sns").list_topics()["Topics"]}),
    ):
        made = [physical for k, physical in before.values() if k == kind]
        assert made and not set(made) & live, (kind, set(made) & live)


def test_attach_mode_switches_the_data_source_and_puts_it_back(engine: dict[str, Any]) -> None:
    """Attach mode, as `make deploy` with the ids runs it, on a Knowledge Base and data source made through
    ministack's bedrock-agent API: the inspection and the attachment run against it; destroy puts the data
    source back as it was. (ministack answers an unset serverSideEncryptionConfiguration as null and an
    unset description as "", which AWS leaves out: both are set here, as a console user may.)"""
    ministack: Ministack = engine["ministack"]
    iam, agent = ministack.client("iam"), ministack.client("bedrock-agent")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "bedrock.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    role = iam.create_role(RoleName="kb-service-role", AssumeRolePolicyDocument=json.dumps(trust))["Role"][
        "Arn"
    ]
    ministack.client("s3").create_bucket(Bucket="team-docs")
    embedding = f"arn:aws:bedrock:{REGION}::foundation-model/amazon.titan-embed-text-v2:0"
    kb = agent.create_knowledge_base(
        name="team-kb",
        roleArn=role,
        knowledgeBaseConfiguration={
            "type": "VECTOR",
            "vectorKnowledgeBaseConfiguration": {"embeddingModelArn": embedding},
        },
        storageConfiguration={
            "type": "S3_VECTORS",
            "s3VectorsConfiguration": {"indexArn": f"arn:aws:s3vectors:{REGION}:{ACCOUNT}:bucket/v/index/i"},
        },
    )["knowledgeBase"]
    chunking = {
        "chunkingStrategy": "FIXED_SIZE",
        "fixedSizeChunkingConfiguration": {"maxTokens": 300, "overlapPercentage": 20},
    }
    source = agent.create_data_source(
        knowledgeBaseId=kb["knowledgeBaseId"],
        name="team-docs",
        description="the team's runbooks",
        serverSideEncryptionConfiguration={},
        dataSourceConfiguration={"type": "S3", "s3Configuration": {"bucketArn": "arn:aws:s3:::team-docs"}},
        vectorIngestionConfiguration={"chunkingConfiguration": chunking},
    )["dataSource"]
    kb_id, ds_id = kb["knowledgeBaseId"], source["dataSourceId"]
    sns = ministack.client("sns")
    team_topic = sns.create_topic(Name="team-oncall")["TopicArn"]  # the user's own: the alarms go there
    context = [
        "-c",
        f"knowledgeBaseId={kb_id}",
        "-c",
        f"dataSourceId={ds_id}",
        "-c",
        f"knowledgeBaseRoleArn={role}",
        "-c",
        f"alarmTopicArn={team_topic}",
    ]
    work: Path = engine["work"]
    _synth(work / "attach", context)
    (template,) = (work / "attach").glob("*.template.json")
    stack = template.name.removesuffix(".template.json")
    assert stack == "ContextualKbAttached"  # never the full stack's name
    assembly = work / "attach-ministack"
    removed = adapt_assembly(
        work / "attach",
        assembly,
        stack,
        attributes={},
        function_environment={"ANTHROPIC_BEDROCK_BASE_URL": engine["bedrock"].url},
    )
    # attach mode's types are all provisioned but the delivery of the Knowledge Base's logs
    resources = json.loads(template.read_text())["Resources"]
    assert sorted(resources[r]["Type"] for r in removed) == [
        "AWS::Logs::Delivery",
        "AWS::Logs::DeliveryDestination",
        "AWS::Logs::DeliverySource",
    ]
    ran = cdk(["bootstrap", f"aws://{ACCOUNT}/{REGION}"], ministack.environment(), work)
    assert ran.returncode == 0, ran.stderr[-3000:]
    ran = cdk(
        ["deploy", stack, "--app", str(assembly), "--require-approval", "never"],
        ministack.environment(),
        work,
    )
    assert ran.returncode == 0, ran.stderr[-4000:]

    attached = agent.get_data_source(knowledgeBaseId=kb_id, dataSourceId=ds_id)["dataSource"]
    ingestion = attached["vectorIngestionConfiguration"]
    (step,) = ingestion["customTransformationConfiguration"]["transformations"]
    function_arn = step["transformationFunction"]["transformationLambdaConfiguration"]["lambdaArn"]
    assert step["stepToApply"] == "POST_CHUNKING" and ":function:" in function_arn
    assert ingestion["chunkingConfiguration"] == chunking and attached["description"] == "the team's runbooks"
    variables = ministack.client("lambda").get_function_configuration(FunctionName=function_arn)[
        "Environment"
    ]["Variables"]
    assert variables["VECTOR_STORE"] == "s3vectors" and variables["CHUNKING"] == "kb"  # from the inspection
    alarms = ministack.client("cloudwatch").describe_alarms()["MetricAlarms"]
    ours = [a for a in alarms if a["AlarmName"].startswith(f"{stack}-")]
    assert len(ours) == 7 and all(a["AlarmActions"] == a["OKActions"] == [team_topic] for a in ours)
    assert not [t for t in sns.list_topics()["Topics"] if t["TopicArn"] != team_topic]  # no topic of ours
    groups = {g["logGroupName"] for g in ministack.client("logs").describe_log_groups()["logGroups"]}
    assert f"/aws/vendedlogs/bedrock/knowledge-bases/{stack}" in groups

    ran = cdk(["destroy", stack, "--app", str(assembly), "--force"], ministack.environment(), work)
    assert ran.returncode == 0, ran.stderr[-3000:]
    detached = agent.get_data_source(knowledgeBaseId=kb_id, dataSourceId=ds_id)["dataSource"]
    assert not (detached["vectorIngestionConfiguration"].get("customTransformationConfiguration") or {}).get(
        "transformations"
    )
    assert detached["vectorIngestionConfiguration"]["chunkingConfiguration"] == chunking
    # Destroy removes what it added and nothing of the user's: their topic stays, the log group goes.
    assert [t["TopicArn"] for t in sns.list_topics()["Topics"]] == [team_topic]
    groups = {g["logGroupName"] for g in ministack.client("logs").describe_log_groups()["logGroups"]}
    assert f"/aws/vendedlogs/bedrock/knowledge-bases/{stack}" not in groups
    assert not [a for a in ministack.client("cloudwatch").describe_alarms()["MetricAlarms"]
                if a["AlarmName"].startswith(f"{stack}-")]  # fmt: skip
