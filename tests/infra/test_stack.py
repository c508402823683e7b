"""The synthesized templates: wiring, least privilege, the index Bedrock needs, cdk-nag and cfn-lint."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.infra.conftest import NO_BUNDLING, STORES, cfn_lint, flat, only, resources, transform_function

# Wildcard resources each role may hold, and why (the same reasons are acknowledged for cdk-nag in code).
ALLOWED_WILDCARD_SUFFIXES = (
    "/*",  # objects of one bucket
    ":*",  # versions of the function
    ":log-stream:*",  # the function's own log group
)


def statements(template: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for policy in resources(template, "AWS::IAM::Policy").values():
        found.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return found


@pytest.mark.parametrize("store", STORES)
def test_the_data_source_runs_the_function_as_post_chunking_transformation(
    synthesized: dict[str, Any], store: str
) -> None:
    template = synthesized[store]["json"]
    source = only(template, "AWS::Bedrock::DataSource")
    ingestion = source["VectorIngestionConfiguration"]
    custom = ingestion["CustomTransformationConfiguration"]
    (transformation,) = custom["Transformations"]
    assert transformation["StepToApply"] == "POST_CHUNKING"
    function_id, _ = transform_function(template)
    lambda_arn = transformation["TransformationFunction"]["TransformationLambdaConfiguration"]["LambdaArn"]
    assert lambda_arn == {"Fn::GetAtt": [function_id, "Arn"]}
    (intermediate_id,) = [k for k in resources(template, "AWS::S3::Bucket") if "Intermediate" in k]
    assert intermediate_id in flat(custom["IntermediateStorage"]["S3Location"]["URI"])
    assert ingestion["ChunkingConfiguration"] == {
        "ChunkingStrategy": "FIXED_SIZE",
        "FixedSizeChunkingConfiguration": {"MaxTokens": 300, "OverlapPercentage": 20},
    }
    (source_id,) = [k for k in resources(template, "AWS::S3::Bucket") if "Source" in k]
    assert source["DataSourceConfiguration"]["S3Configuration"]["BucketArn"] == {
        "Fn::GetAtt": [source_id, "Arn"]
    }


@pytest.mark.parametrize("store", STORES)
def test_the_function_is_python_313_arm64_with_the_handler_and_settings(
    synthesized: dict[str, Any], store: str
) -> None:
    _, function = transform_function(synthesized[store]["json"])
    assert function["Runtime"] == "python3.13"
    assert function["Architectures"] == ["arm64"]
    assert function["Handler"] == "contextual_kb.runtime.handler.lambda_handler"
    assert function["Timeout"] == 900
    assert function["MemorySize"] == 1024
    assert function["Environment"]["Variables"]["CONTEXT_STRATEGY"] == "claude"


@pytest.mark.parametrize("store", STORES)
def test_iam_has_no_wildcard_beyond_the_acknowledged_ones(synthesized: dict[str, Any], store: str) -> None:
    for statement in statements(synthesized[store]["json"]):
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        assert all("*" not in action for action in actions), statement
        targets = (
            statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        )
        for target in targets:
            text = flat(target)
            if target == "*":  # only X-Ray, which has no resource-level permissions
                assert all(a.startswith("xray:") for a in actions), statement
            elif "*" in text:
                allowed = text.rstrip('"]}').endswith(ALLOWED_WILDCARD_SUFFIXES) or (
                    "foundation-model/" in text
                    and "InferenceProfileArn" in flat(statement.get("Condition", {}))
                )
                assert allowed, statement


@pytest.mark.parametrize("store", STORES)
def test_the_function_may_invoke_only_the_configured_model(synthesized: dict[str, Any], store: str) -> None:
    invoke = [s for s in statements(synthesized[store]["json"]) if s["Action"] == "bedrock:InvokeModel"]
    text = flat(invoke)
    assert "inference-profile/global.anthropic.claude-haiku-4-5-20251001-v1:0" in text
    assert "foundation-model/anthropic.claude-haiku-4-5-20251001-v1:0" in text
    assert "foundation-model/amazon.titan-embed-text-v2:0" in text  # the KB's embedding model
    models = {
        part.split("foundation-model/")[1].split('"')[0]
        for part in text.split("arn:")
        if "foundation-model/" in part
    }
    assert models == {"anthropic.claude-haiku-4-5-20251001-v1:0", "amazon.titan-embed-text-v2:0"}


def test_the_opensearch_index_is_created_by_its_custom_resource_from_the_one_definition(
    synthesized: dict[str, Any],
) -> None:
    """The index's body (our analysis in full, what Bedrock needs) is the definition ckb eval reads; its name
    carries the body's hash; the Knowledge Base uses that name and is created after the index answers."""
    from contextual_kb.query.index_definition import index_body, index_name

    template = synthesized["opensearch"]["json"]
    (index_id, index), *others = resources(template, "Custom::OpenSearchIndex").items()
    assert not others
    properties = index["Properties"]
    body = index_body(1024)
    assert json.loads(properties["Body"]) == body and properties["IndexName"] == index_name(body)
    assert properties["IndexName"].startswith("contextual-kb-")
    fields = body["mappings"]["properties"]
    assert fields["bedrock-knowledge-base-default-vector"]["method"]["engine"] == "faiss"
    assert fields["AMAZON_BEDROCK_TEXT_CHUNK"]["analyzer"] == "contextual_kb"
    access_id = next(iter(resources(template, "AWS::OpenSearchServerless::AccessPolicy")))
    collection_id = next(iter(resources(template, "AWS::OpenSearchServerless::Collection")))
    assert {access_id, collection_id} <= set(index["DependsOn"])
    (_, kb_resource), *_ = resources(template, "AWS::Bedrock::KnowledgeBase").items()
    assert index_id in kb_resource["DependsOn"]
    storage = kb_resource["Properties"]["StorageConfiguration"]["OpensearchServerlessConfiguration"]
    assert storage["VectorIndexName"] == properties["IndexName"]
    assert storage["FieldMapping"] == {
        "VectorField": "bedrock-knowledge-base-default-vector",
        "TextField": "AMAZON_BEDROCK_TEXT_CHUNK",
        "MetadataField": "AMAZON_BEDROCK_METADATA",
    }
    handler = [
        f["Properties"]
        for f in resources(template, "AWS::Lambda::Function").values()
        if f["Properties"].get("Handler") == "contextual_kb.resources.opensearch_index.on_event"
    ]
    assert len(handler) == 1 and handler[0]["Runtime"] == "python3.13" and handler[0]["Timeout"] == 840
    collection = only(template, "AWS::OpenSearchServerless::Collection")
    assert collection["Type"] == "VECTORSEARCH" and collection["StandbyReplicas"] == "ENABLED"
    policies = resources(template, "AWS::OpenSearchServerless::SecurityPolicy")
    assert sorted(p["Properties"]["Type"] for p in policies.values()) == ["encryption", "network"]


def test_s3_vectors_keeps_bedrock_text_and_metadata_non_filterable(synthesized: dict[str, Any]) -> None:
    template = synthesized["s3vectors"]["json"]
    index = only(template, "AWS::S3Vectors::Index")
    assert index["MetadataConfiguration"]["NonFilterableMetadataKeys"] == [
        "AMAZON_BEDROCK_TEXT",
        "AMAZON_BEDROCK_METADATA",
    ]
    assert index["Dimension"] == 1024 and index["DataType"] == "float32"
    assert only(template, "AWS::Bedrock::KnowledgeBase")["StorageConfiguration"]["Type"] == "S3_VECTORS"


@pytest.mark.parametrize("store", STORES)
def test_buckets_block_public_access_enforce_tls_and_encrypt(synthesized: dict[str, Any], store: str) -> None:
    template = synthesized[store]["json"]
    buckets = resources(template, "AWS::S3::Bucket")
    assert len(buckets) == 3
    for bucket in buckets.values():
        properties = bucket["Properties"]
        assert properties["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        assert properties["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    policies = flat(resources(template, "AWS::S3::BucketPolicy"))
    assert policies.count('"aws:SecureTransport": "false"') == 3
    (source,) = [b for k, b in buckets.items() if "Source" in k]
    assert source["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    (intermediate,) = [b for k, b in buckets.items() if "Intermediate" in k]
    rules = intermediate["Properties"]["LifecycleConfiguration"]["Rules"]
    assert {r["Prefix"] for r in rules} == {
        "aws/bedrock/knowledge_bases/",
        "contextual-kb/output/",
        "contextual-kb/batch/",
    }
    assert all(r["ExpirationInDays"] == 30 for r in rules)  # the remembered contexts are kept


@pytest.mark.parametrize("store", STORES)
def test_outputs_alarms_and_dashboard(synthesized: dict[str, Any], store: str) -> None:
    template = synthesized[store]["json"]
    assert {
        "KnowledgeBaseId",
        "DataSourceId",
        "SourceBucketName",
        "IntermediateBucketName",
        "TransformFunctionName",
        "AlarmTopicArn",
        "IngestionLogGroupName",
    } <= set(template["Outputs"])
    alarms = {
        a["Properties"]["AlarmDescription"] for a in resources(template, "AWS::CloudWatch::Alarm").values()
    }
    assert len(alarms) == 7  # with the model's quota usage (ModelTokensNearQuota: test_quota_usage.py)
    assert len(resources(template, "AWS::CloudWatch::Dashboard")) == 1


@pytest.mark.parametrize("store", STORES)
def test_cfn_lint_finds_nothing_but_redundant_depends_on(synthesized: dict[str, Any], store: str) -> None:
    path = synthesized[store]["path"]
    result = cfn_lint([path])
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_unacknowledged_cdk_nag_finding_fails_synth() -> None:
    from aws_cdk import aws_iam as iam

    from stacks.app_builder import build_app

    app, stack = build_app({**NO_BUNDLING, "vectorStore": "s3vectors"})
    stack.transform.role.add_to_policy(iam.PolicyStatement(actions=["s3:*"], resources=["*"]))
    with pytest.raises(RuntimeError, match=r"(?s)ValidationFailed.*AwsSolutions-IAM5\[Action::s3:\*\]"):
        app.synth()


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"vectorStore": "pinecone"}, "vectorStore"),
        ({"embeddingDimension": 768}, "Titan Text Embeddings V2 gives 256, 512, 1024"),
        ({"chunking": "hierarchical", "parentMaxTokens": 300, "childMaxTokens": 300}, "childMaxTokens"),
        ({"chunking": "chunky"}, "chunking"),
        (
            {"chunking": "none", "functionEnvironment": {"CHUNKING": "kb"}},
            "functionEnvironment.CHUNKING: with chunking=none the stack sets it",
        ),
        (
            {"chunking": "none", "functionEnvironment": {"CHUNK_MAX_TOKENS": "500"}},
            "use chunkMaxTokens and chunkOverlapTokens",
        ),
        ({"functionEnvironment": {"CHUNKING": "structure"}}, "would chunk the Knowledge Base's chunks again"),
        ({"chunking": "none", "chunkOverlapTokens": 200}, "chunkOverlapTokens=200 must be at most half"),
        ({"functionTimeoutSeconds": 120}, "functionTimeoutSeconds"),
        (
            {"functionEnvironment": {"ANTHROPIC_BEDROCK_BASE_URL": "https://x"}},
            "may not set ANTHROPIC_BEDROCK",
        ),
        ({"functionEnvironment": '{"AWS_ENDPOINT_URL_S3": "https://x"}'}, "may not set AWS_ENDPOINT_URL_S3"),
        (
            {"functionEnvironment": {"ANTHROPIC_LOG": "debug", "Https_Proxy": "h"}},
            "ANTHROPIC_LOG, Https_Proxy",
        ),
        # The function's own settings model reads functionEnvironment: what it refuses fails synth.
        (
            {"functionEnvironment": {"CONTEXT_STRATEGY": "foo"}},
            r"functionEnvironment: environment variable CONTEXT_STRATEGY='foo': Input should be",
        ),
        (
            {"functionEnvironment": {"CONTEXT_STRATGY": "structural"}},
            r"CONTEXT_STRATGY: not a setting of the function \(did you mean CONTEXT_STRATEGY\?\)",
        ),
        ({"functionEnvironment": {"GROUP_SIZE": "1"}}, "GROUP_SIZE"),
        ({"chunking": "hierarchical", "vectorStore": "s3vectors"}, "AWS does not recommend it"),
        ({"stackName": "1-starts-with-a-digit"}, "stackName"),
        ({"stackName": "x" * 129}, "stackName"),
    ],
)
def test_settings_that_cannot_work_fail_synth_with_a_clear_message(
    context: dict[str, Any], message: str
) -> None:
    from contextual_kb.cdk.config import ConfigError, load

    with pytest.raises(ConfigError, match=message):
        load(context)


def test_chunking_strategies_render_as_the_data_source_expects() -> None:
    from contextual_kb.cdk.config import load
    from contextual_kb.cdk.knowledge_base import chunking_configuration

    hierarchical = chunking_configuration(load({"chunking": "hierarchical"}))
    assert hierarchical == {
        "chunkingStrategy": "HIERARCHICAL",
        "hierarchicalChunkingConfiguration": {
            "levelConfigurations": [{"maxTokens": 1500}, {"maxTokens": 300}],
            "overlapTokens": 60,
        },
    }
    semantic = chunking_configuration(load({"chunking": "semantic"}))
    assert semantic is not None and semantic["chunkingStrategy"] == "SEMANTIC"
    assert chunking_configuration(load({"chunking": "default"})) is None
    assert chunking_configuration(load({"chunking": "none"})) == {"chunkingStrategy": "NONE"}
    assert load({"chunking": "none", "chunkMaxTokens": 500, "chunkOverlapTokens": 50}).function_chunking == {
        "CHUNKING": "structure",
        "CHUNK_MAX_TOKENS": "500",
        "CHUNK_OVERLAP_TOKENS": "50",
    }
    assert load({"chunking": "fixed_size"}).function_chunking == {}


# The function's asset, zipped, at most (issue 16: 34 MB before, with the command line and the AWS SDK).
MAX_ASSET_ZIPPED_BYTES = 12 * 1024 * 1024


def test_the_asset_holds_the_runtime_alone_for_the_lambda_platform_within_its_budget(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The real local bundling: the runtime package and its pinned wheels for Python 3.13 on arm64; no
    command line, evaluation, local tooling, tests or bytecode; the AWS SDK left to the Lambda runtime;
    zipped, within the budget."""
    import zipfile

    from contextual_kb.cdk.bundling import build

    target = tmp_path_factory.mktemp("asset")
    build(target, "arm64")
    package = target / "contextual_kb"
    assert (package / "runtime" / "handler.py").is_file()
    assert sorted(p.name for p in package.iterdir()) == ["__init__.py", "py.typed", "runtime"]
    assert not list(target.rglob("*.pyc")) and not list(target.rglob("__pycache__"))
    assert not (target / "tests").exists() and not (target / "bin").exists()
    tops = {p.name.split("-")[0].lower() for p in target.iterdir()}
    assert not tops & {"boto3", "botocore", "s3transfer", "urllib3"}, tops
    natives = [p.name for p in target.rglob("*.so")]
    assert any("cpython-313-aarch64-linux-gnu" in name for name in natives), natives
    assert not any("x86_64" in name or "cpython-311" in name for name in natives), natives
    versions = {
        p.name.removesuffix(".dist-info").split("-")[0].lower(): p.name.removesuffix(".dist-info").split("-")[
            1
        ]
        for p in target.glob("*.dist-info")
    }
    assert versions["anthropic"] == "2.10.0"
    assert versions["pydantic"] == "2.14.3"
    archive = tmp_path_factory.mktemp("zipped") / "asset.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
        for path in sorted(p for p in target.rglob("*") if p.is_file()):
            out.write(path, path.relative_to(target).as_posix())
    assert archive.stat().st_size <= MAX_ASSET_ZIPPED_BYTES, archive.stat().st_size


def test_the_docker_fallback_runs_the_same_build_for_the_functions_platform() -> None:
    """Without pip here, CDK bundles in Docker: the same script on the same staged inputs, for the
    function's platform (an x86 machine must not put x86 wheels in an arm64 function)."""
    from contextual_kb.cdk import bundling

    folder, key = bundling.stage("arm64")
    assert (folder / "asset_build.py").read_bytes() == bundling.ASSET_BUILD.read_bytes()
    assert (folder / "constraints.txt").read_bytes() == (ROOT / "constraints.txt").read_bytes()
    assert (folder / "requirements.txt").read_text().split() == bundling.runtime_requirements()
    assert sorted(p.name for p in (folder / "contextual_kb").iterdir()) == [
        "__init__.py",
        "py.typed",
        "runtime",
    ]
    command = " ".join(bundling.docker_command("arm64"))
    assert "asset_build.py --source /asset-input --output /asset-output --architecture arm64" in command
    assert bundling.DOCKER_PLATFORMS["arm64"] == "linux/arm64"
    assert key == bundling.bundle_key("arm64") != bundling.bundle_key("x86_64")


def test_a_kms_key_encrypts_the_buckets_and_is_given_to_the_data_source_and_collection(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from aws_cdk.assertions import Template

    from stacks.app_builder import build_app

    app, stack = build_app({**NO_BUNDLING, "vectorStore": "opensearch", "kmsKey": True})
    app.synth()  # cdk-nag passes with the key too
    template = Template.from_stack(stack).to_json()
    (key_id,) = resources(template, "AWS::KMS::Key")
    key_arn = {"Fn::GetAtt": [key_id, "Arn"]}
    source = only(template, "AWS::Bedrock::DataSource")
    assert source["ServerSideEncryptionConfiguration"] == {"KmsKeyArn": key_arn}
    encrypted = [b for k, b in resources(template, "AWS::S3::Bucket").items() if "AccessLogs" not in k]
    assert all(key_id in flat(b["Properties"]["BucketEncryption"]) for b in encrypted)
    policies = resources(template, "AWS::OpenSearchServerless::SecurityPolicy")
    assert key_id in flat(policies)
    path = tmp_path_factory.mktemp("kms") / "template.json"
    path.write_text(json.dumps(template))
    linted = cfn_lint([path])
    assert linted.returncode == 0, linted.stdout


# Flags the CDK CLI no longer reports (its FlagOperations.OBSOLETE_FLAGS).
OBSOLETE_FLAGS = {
    "@aws-cdk/core:enableStackNameDuplicates",
    "@aws-cdk/aws-s3:grantWriteWithoutAcl",
    "@aws-cdk/aws-kms:defaultKeyPolicies",
}


def test_every_recommended_feature_flag_is_configured(synthesized: dict[str, Any]) -> None:
    """`cdk synth` warns "N feature flags are not configured" for each flag the user left unset whose
    default differs from AWS's recommendation (the CLI's own rule, read from the assembly's flag report):
    cdk.json sets them all, as `cdk init` does, and the tests synthesize with the same flags."""
    manifest = json.loads((synthesized["opensearch"]["assembly"] / "manifest.json").read_text())
    report = manifest["artifacts"]["aws-cdk-lib/feature-flag-report"]["properties"]["flags"]
    unconfigured = [
        name
        for name, flag in report.items()
        if name not in OBSOLETE_FLAGS
        and "userValue" not in flag
        and flag.get("unconfiguredBehavesLike", {}).get("v2", False) != flag["recommendedValue"]
    ]
    assert unconfigured == []


def test_a_bad_setting_fails_synth_in_one_line() -> None:
    env = {
        **os.environ,
        "CDK_CONTEXT_JSON": json.dumps({"vectorStore": "foo"}),
        "CDK_OUTDIR": "/tmp/ckb-nowhere",
    }
    done = subprocess.run(
        [sys.executable, "app.py"],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "error: CDK context vectorStore: Input should be 'opensearch' or 's3vectors'"
    )
    assert "Traceback" not in done.stderr


def test_a_kms_key_with_s3_vectors_synthesizes_and_lets_its_indexing_service_use_the_key() -> None:
    """`kmsKey=true` with S3 Vectors crashed at synth (kmsKeyArn for kms_key_arn); the key's policy must let
    S3 Vectors' indexing principal decrypt, for this account's vector buckets only."""
    from aws_cdk.assertions import Template

    from stacks.app_builder import build_app

    app, stack = build_app({**NO_BUNDLING, "vectorStore": "s3vectors", "kmsKey": True})
    app.synth()
    template = Template.from_stack(stack).to_json()
    bucket = only(template, "AWS::S3Vectors::VectorBucket")
    key_id = next(iter(resources(template, "AWS::KMS::Key")))
    assert bucket["EncryptionConfiguration"] == {
        "SseType": "aws:kms",
        "KmsKeyArn": {"Fn::GetAtt": [key_id, "Arn"]},
    }
    statements = only(template, "AWS::KMS::Key")["KeyPolicy"]["Statement"]
    (indexing,) = [
        s for s in statements if s.get("Principal") == {"Service": "indexing.s3vectors.amazonaws.com"}
    ]
    assert indexing["Action"] == "kms:Decrypt"
    assert "aws:SourceAccount" in flat(indexing["Condition"]) and ":bucket/*" in flat(indexing["Condition"])


def test_names_fit_their_limits_for_any_stack_name() -> None:
    from contextual_kb.cdk import naming

    for stack_name in ("ContextualKb", "A" * 32, "My--Stack-2024", "x" * 128, "Ab"):
        collection = naming.collection_name(stack_name)
        assert 3 <= len(collection) <= 28 and re.fullmatch(r"[a-z][a-z0-9-]*", collection), collection
        for kind in ("enc", "net", "access"):
            policy = naming.policy_name(stack_name, kind)
            assert 3 <= len(policy) <= 32 and re.fullmatch(r"[a-z][a-z0-9-]+", policy), policy
        for suffix in ("-kb-abc123", "-source"):
            name = naming.bedrock_name(stack_name, suffix)
            assert re.fullmatch(r"([0-9a-zA-Z][_-]?){1,100}", name) and len(name) <= 100, name
    # Two long names that share their head still differ.
    assert naming.policy_name("A" * 40 + "one", "access") != naming.policy_name("A" * 40 + "two", "access")
