"""Security properties of the synthesized templates claimed in docs/SECURITY.md (reuses the session synth)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infra.conftest import STORES, as_list, flat, only, resources, transform_function


def logical_id(template: dict[str, Any], kind: str, contains: str) -> str:
    (found,) = [k for k in resources(template, kind) if contains in k]
    return found


def role_statements(template: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    found = []
    for policy in resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            found.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return found


def actions(statements: list[dict[str, Any]]) -> set[str]:
    return {action for s in statements for action in as_list(s["Action"])}


@pytest.mark.parametrize("store", STORES)
def test_the_function_role_reads_and_writes_intermediate_objects_invokes_its_model_logs_and_traces(
    synthesized: dict[str, Any], store: str
) -> None:
    template = synthesized[store]["json"]
    role_id = logical_id(template, "AWS::IAM::Role", "TransformRole")
    role = resources(template, "AWS::IAM::Role")[role_id]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}}
    ]
    assert "ManagedPolicyArns" not in role  # no AWSLambdaBasicExecutionRole: its own log group only
    statements = role_statements(template, role_id)
    assert all(s["Effect"] == "Allow" for s in statements)
    assert actions(statements) == {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "s3:GetObject",
        "s3:PutObject",
        "s3:ListBucket",
        "bedrock:InvokeModel",
    }
    source = logical_id(template, "AWS::S3::Bucket", "Source")
    intermediate = logical_id(template, "AWS::S3::Bucket", "Intermediate")
    (s3_statement,) = [s for s in statements if "s3:GetObject" in as_list(s["Action"])]
    assert s3_statement["Resource"] == {"Fn::Join": ["", [{"Fn::GetAtt": [intermediate, "Arn"]}, "/*"]]}
    # No delete at all: a failed call leaves its outputs (another call of the same event may own them).
    # Listing (so a missing key is a 404, not a 403) on the intermediate bucket only.
    (list_statement,) = [s for s in statements if "s3:ListBucket" in as_list(s["Action"])]
    assert list_statement["Resource"] == {"Fn::GetAtt": [intermediate, "Arn"]}
    assert source not in flat(statements)  # the function never touches the documents themselves
    log_group = logical_id(template, "AWS::Logs::LogGroup", "TransformLogs")
    (logs_statement,) = [s for s in statements if "logs:PutLogEvents" in as_list(s["Action"])]
    assert flat(logs_statement["Resource"]).count(log_group) == 2


@pytest.mark.parametrize("store", STORES)
def test_the_knowledge_base_role_is_bedrocks_for_this_account_with_its_listed_permissions(
    synthesized: dict[str, Any], store: str
) -> None:
    template = synthesized[store]["json"]
    role_id = logical_id(template, "AWS::IAM::Role", "KnowledgeBaseRole")
    (trust,) = resources(template, "AWS::IAM::Role")[role_id]["Properties"]["AssumeRolePolicyDocument"][
        "Statement"
    ]
    assert trust["Principal"] == {"Service": "bedrock.amazonaws.com"}
    assert trust["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert ":knowledge-base/*" in flat(trust["Condition"]["ArnLike"]["aws:SourceArn"])
    statements = role_statements(template, role_id)
    vector_actions = (
        {"aoss:APIAccessAll"}
        if store == "opensearch"
        else {
            "s3vectors:PutVectors",
            "s3vectors:GetVectors",
            "s3vectors:DeleteVectors",
            "s3vectors:QueryVectors",
            "s3vectors:GetIndex",
        }
    )
    assert actions(statements) == {
        "bedrock:InvokeModel",
        "s3:ListBucket",
        "s3:GetObject",
        "s3:PutObject",
        "s3:DeleteObject",
        "lambda:InvokeFunction",
        *vector_actions,
    }
    source = logical_id(template, "AWS::S3::Bucket", "Source")
    writes = [s for s in statements if {"s3:PutObject", "s3:DeleteObject"} & set(as_list(s["Action"]))]
    assert writes and all(source not in flat(s["Resource"]) for s in writes)  # documents: read only
    (invoke,) = [s for s in statements if s["Action"] == "bedrock:InvokeModel"]
    assert flat(invoke["Resource"]).endswith('::foundation-model/amazon.titan-embed-text-v2:0"]]}')


def rendered(value: Any) -> Any:
    """A policy built with Fn::Join, as JSON: each token written as <LogicalId.Attribute>."""
    parts = []
    for part in value["Fn::Join"][1]:
        if isinstance(part, str):
            parts.append(part)
        elif "Fn::GetAtt" in part:
            parts.append(f"<{'.'.join(part['Fn::GetAtt'])}>")
        else:
            parts.append(f"<{json.dumps(part)}>")
    return json.loads("".join(parts))


def test_the_opensearch_collection_answers_the_index_resource_and_the_kb_role_each_for_its_part(
    synthesized: dict[str, Any],
) -> None:
    """The index's custom resource may create, replace and delete the index (teardown and rollback delete it:
    without DeleteIndex they failed); the Knowledge Base reads and writes documents; no one else."""
    template = synthesized["opensearch"]["json"]
    access = only(template, "AWS::OpenSearchServerless::AccessPolicy")
    assert access["Type"] == "data"
    manager, kb = rendered(access["Policy"])
    index_role = logical_id(template, "AWS::IAM::Role", "VectorStoreIndexRole")
    kb_role = logical_id(template, "AWS::IAM::Role", "KnowledgeBaseRole")
    assert manager["Principal"] == [f"<{index_role}.Arn>"]
    assert kb["Principal"] == [f"<{kb_role}.Arn>"]
    rules = {r["ResourceType"]: r["Permission"] for r in manager["Rules"]}
    assert rules == {
        "collection": ["aoss:DescribeCollectionItems"],
        "index": ["aoss:CreateIndex", "aoss:DescribeIndex", "aoss:UpdateIndex", "aoss:DeleteIndex"],
    }
    rules = {r["ResourceType"]: r["Permission"] for r in kb["Rules"]}
    assert rules == {
        "collection": ["aoss:DescribeCollectionItems"],
        "index": ["aoss:DescribeIndex", "aoss:ReadDocument", "aoss:WriteDocument"],
    }
    policies = {
        p["Properties"]["Type"]: json.loads(p["Properties"]["Policy"])
        for p in resources(template, "AWS::OpenSearchServerless::SecurityPolicy").values()
    }
    assert policies["encryption"]["AWSOwnedKey"] is True
    # Reachable from AWS's network (Bedrock, the index's function), SigV4 + the data policy above.
    assert policies["network"][0]["AllowFromPublic"] is True


@pytest.mark.parametrize("store", STORES)
def test_buckets_keep_access_logs_are_retained_and_refuse_plain_http_to_everyone(
    synthesized: dict[str, Any], store: str
) -> None:
    template = synthesized[store]["json"]
    buckets = resources(template, "AWS::S3::Bucket")
    logs = logical_id(template, "AWS::S3::Bucket", "AccessLogs")
    for name, prefix in (("Source", "source/"), ("Intermediate", "intermediate/")):
        bucket = buckets[logical_id(template, "AWS::S3::Bucket", name)]["Properties"]
        assert bucket["LoggingConfiguration"] == {
            "DestinationBucketName": {"Ref": logs},
            "LogFilePrefix": prefix,
        }
    access_logs = buckets[logs]["Properties"]
    assert access_logs["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    assert access_logs["LifecycleConfiguration"]["Rules"] == [{"ExpirationInDays": 365, "Status": "Enabled"}]
    assert all(b["DeletionPolicy"] == b["UpdateReplacePolicy"] == "Retain" for b in buckets.values())
    for bucket_id in buckets:
        (policy,) = [
            p["Properties"]["PolicyDocument"]["Statement"]
            for p in resources(template, "AWS::S3::BucketPolicy").values()
            if p["Properties"]["Bucket"] == {"Ref": bucket_id}
        ]
        (deny,) = [s for s in policy if s["Effect"] == "Deny"]
        assert deny["Principal"] == {"AWS": "*"} and deny["Action"] == "s3:*"
        assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        assert flat(deny["Resource"]).count(bucket_id) == 2  # the bucket and its objects
        allows = [s for s in policy if s["Effect"] == "Allow"]
        assert all(s["Principal"] == {"Service": "logging.s3.amazonaws.com"} for s in allows)
        assert all(
            s["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}} for s in allows
        )


@pytest.mark.parametrize("store", STORES)
def test_by_default_data_at_rest_is_encrypted_with_aws_managed_keys(
    synthesized: dict[str, Any], store: str
) -> None:
    template = synthesized[store]["json"]
    for bucket in resources(template, "AWS::S3::Bucket").values():
        (rule,) = bucket["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        assert rule["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}
    assert not resources(template, "AWS::KMS::Key")
    assert "ServerSideEncryptionConfiguration" not in only(template, "AWS::Bedrock::DataSource")
    if store == "s3vectors":
        assert only(template, "AWS::S3Vectors::VectorBucket")["EncryptionConfiguration"] == {
            "SseType": "AES256"
        }


@pytest.mark.parametrize("store", STORES)
def test_the_function_logs_to_its_own_group_traces_and_turns_on_no_verbose_output(
    synthesized: dict[str, Any], store: str
) -> None:
    template = synthesized[store]["json"]
    _, function = transform_function(template)
    assert function["TracingConfig"] == {"Mode": "Active"}
    log_group = logical_id(template, "AWS::Logs::LogGroup", "TransformLogs")
    assert function["LoggingConfig"]["LogGroup"] == {"Ref": log_group}
    assert all(
        g["Properties"]["RetentionInDays"] == 30 for g in resources(template, "AWS::Logs::LogGroup").values()
    )
    environment = function["Environment"]["Variables"]
    assert environment == {
        "POWERTOOLS_SERVICE_NAME": "contextual-kb",
        "POWERTOOLS_METRICS_NAMESPACE": "ContextualKB",
        "CONTEXT_STRATEGY": "claude",
        "VECTOR_STORE": store,  # S3 Vectors' 1 KB of metadata a chunk is the function's to keep
    }  # no log level, event logging, ANTHROPIC_LOG, or endpoint override unless the deployer adds one


@pytest.mark.parametrize("store", STORES)
def test_alarms_watch_errors_time_throttles_fallbacks_and_model_throttles(
    synthesized: dict[str, Any], store: str
) -> None:
    template = synthesized[store]["json"]
    alarms = {
        (a["Properties"]["Namespace"], a["Properties"]["MetricName"]): a["Properties"]
        for a in resources(template, "AWS::CloudWatch::Alarm").values()
    }
    assert {key: (a["Statistic"], a["Threshold"]) for key, a in alarms.items()} == {
        ("AWS/Lambda", "Errors"): ("Sum", 1),
        ("AWS/Lambda", "Duration"): ("Maximum", 0.9 * 900 * 1000),
        ("AWS/Lambda", "Throttles"): ("Sum", 1),
        ("ContextualKB", "ContextFallbacks"): ("Sum", 1),
        ("ContextualKB", "ModelThrottles"): ("Sum", 100),
        ("ContextualKB", "IngestionDocumentsFailed"): ("Sum", 1),  # the Knowledge Base's logs, filtered
        ("AWS/Bedrock", "EstimatedTPMQuotaUsage"): ("Sum", 0.8 * 5_000_000),  # Haiku 4.5's global default
    }
    ours = [
        a
        for (namespace, name), a in alarms.items()
        if namespace == "ContextualKB" and name != "IngestionDocumentsFailed"
    ]
    # The function's own series Powertools emits (tests/integration/test_handler.py): Strategy, service and
    # the function's name (what Lambda's environment calls it: the function's Ref).
    (function,) = [k for k in resources(template, "AWS::Lambda::Function") if "TransformFunction" in k]
    assert all(
        a["Dimensions"]
        == [
            {"Name": "FunctionName", "Value": {"Ref": function}},
            {"Name": "Strategy", "Value": "claude"},
            {"Name": "service", "Value": "contextual-kb"},
        ]
        for a in ours
    )


def test_bundling_installs_only_wheels_of_the_pinned_versions() -> None:
    from pathlib import Path

    from contextual_kb.cdk import asset_build
    from contextual_kb.cdk.bundling import runtime_requirements

    command = asset_build.pip_command("python", Path("/asset"), Path("/input"), "arm64")
    assert "--only-binary=:all:" in command  # no source distribution is built (no setup.py runs)
    assert "--no-compile" in command  # no bytecode of the build machine's Python
    assert command[command.index("--constraint") + 1] == "/input/constraints.txt"
    assert command[command.index("--requirement") + 1] == "/input/requirements.txt"
    assert command[command.index("--platform") + 1] == "manylinux2014_aarch64"
    assert command[command.index("--python-version") + 1] == "3.13"
    assert all("==" in requirement for requirement in runtime_requirements())
    assert not [r for r in runtime_requirements() if r.startswith(("boto3", "botocore"))]
