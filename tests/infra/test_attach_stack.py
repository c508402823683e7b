"""The attach mode's template: only what an existing Knowledge Base needs, least privilege, cdk-nag clean
(its findings fail synth), cfn-lint clean; the data source switched only once the function and the role's
policy exist."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.infra.conftest import as_list, cfn_lint, flat, only, resources, synth_variants

ROLE = "arn:aws:iam::123456789012:role/service-role/AmazonBedrockExecutionRoleForKnowledgeBase_x1"
ATTACH = {"knowledgeBaseId": "KBEXIST001", "dataSourceId": "DSEXIST001", "knowledgeBaseRoleArn": ROLE}
VARIANTS = {
    "new-bucket": ATTACH,
    "new-bucket-kms": {**ATTACH, "kmsKey": True, "replaceTransformation": "true"},
    "their-bucket": {
        **ATTACH,
        "intermediateBucketName": "team-intermediate",
        "intermediateKmsKeyArn": "arn:aws:kms:us-east-1:123456789012:key/1234abcd",
        "rdsMetadataColumns": "true",
        "functionEnvironment": {"CONTEXT_METADATA_KEY": "team_context"},
    },
}


@pytest.fixture(scope="module")
def attached(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    return synth_variants(tmp_path_factory.mktemp("attach"), VARIANTS)


def test_every_attach_variant_passes_cfn_lint(attached: dict[str, tuple[Path, dict[str, Any]]]) -> None:
    result = cfn_lint([path for path, _ in attached.values()])
    assert result.returncode == 0, result.stdout + result.stderr


def test_only_what_the_existing_knowledge_base_needs_is_deployed(
    attached: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    for name, (_, template) in attached.items():
        kinds = {r["Type"] for r in template["Resources"].values()}
        for absent in (
            "AWS::Bedrock::KnowledgeBase",
            "AWS::Bedrock::DataSource",
            "AWS::OpenSearchServerless::Collection",
            "AWS::S3Vectors::VectorBucket",
        ):
            assert absent not in kinds, (name, absent)
        buckets = [k for k in resources(template, "AWS::S3::Bucket") if "Source" in k]
        assert buckets == []  # the data source has its own documents
        assert {"Custom::DataSourceInspection", "Custom::DataSourceAttachment"} <= kinds
    _, theirs = attached["their-bucket"]
    assert not [k for k in resources(theirs, "AWS::S3::Bucket") if "Intermediate" in k]  # theirs is used


def test_the_knowledge_base_role_gets_invoke_and_the_intermediate_bucket_and_nothing_else(
    attached: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    _, template = attached["their-bucket"]
    (policy,) = [
        r["Properties"] for k, r in resources(template, "AWS::IAM::Policy").items() if "KnowledgeBase" in k
    ]
    assert policy["Roles"] == [
        "AmazonBedrockExecutionRoleForKnowledgeBase_x1"
    ]  # the role's name, without path
    statements = {tuple(as_list(s["Action"])): s["Resource"] for s in policy["PolicyDocument"]["Statement"]}
    assert set(statements) == {
        ("lambda:InvokeFunction",),
        ("s3:ListBucket",),
        ("s3:DeleteObject", "s3:GetObject", "s3:PutObject"),
        ("kms:Decrypt", "kms:GenerateDataKey"),
    }
    assert "team-intermediate/*" in flat(statements[("s3:DeleteObject", "s3:GetObject", "s3:PutObject")])
    assert (
        statements[("kms:Decrypt", "kms:GenerateDataKey")]
        == "arn:aws:kms:us-east-1:123456789012:key/1234abcd"
    )
    invoke = flat(statements[("lambda:InvokeFunction",)])
    assert "TransformFunction" in invoke and ":*" in invoke


def test_the_attach_function_may_only_read_and_update_that_knowledge_bases_data_sources(
    attached: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    _, template = attached["new-bucket"]
    (policy,) = [
        r["Properties"]
        for k, r in resources(template, "AWS::IAM::Policy").items()
        if k.startswith("AttachRole")
    ]
    bedrock = [
        s for s in policy["PolicyDocument"]["Statement"] if any("bedrock:" in a for a in as_list(s["Action"]))
    ]
    (statement,) = bedrock
    assert sorted(as_list(statement["Action"])) == [
        "bedrock:GetDataSource",
        "bedrock:GetKnowledgeBase",
        "bedrock:UpdateDataSource",
    ]
    assert flat(statement["Resource"]).endswith(':knowledge-base/KBEXIST001"]]}')


def test_the_data_source_is_switched_last_and_the_function_chunks_as_its_data_source_says(
    attached: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    for name, (_, template) in attached.items():
        attachment = only(template, "Custom::DataSourceAttachment")
        (attachment_id,) = resources(template, "Custom::DataSourceAttachment")
        depends = template["Resources"][attachment_id]["DependsOn"]
        assert any(d.startswith("KnowledgeBaseAccess") for d in depends)
        assert any(d.startswith("TransformFunction") for d in depends)
        # Last of all: a failure anywhere else rolls back before the data source is touched.
        assert any(d.startswith("BatchRole") for d in depends) and any(
            d.startswith("Monitoring") for d in depends
        )
        assert attachment["KnowledgeBaseId"] == "KBEXIST001" and attachment["DataSourceId"] == "DSEXIST001"
        assert attachment["ReplaceTransformation"] == ("true" if name == "new-bucket-kms" else "false")
        (policy_id,) = [
            k for k in resources(template, "AWS::IAM::Policy") if k.startswith("KnowledgeBaseAccess")
        ]
        assert "Inspection" in template["Resources"][policy_id]["DependsOn"]  # a wrong role is said first
        (function,) = [
            r["Properties"]
            for r in resources(template, "AWS::Lambda::Function").values()
            if "POST_CHUNKING" in flat(r)
        ]
        variables = function["Environment"]["Variables"]
        assert variables["CHUNKING"] == {"Fn::GetAtt": ["Inspection", "Chunking"]}
        # The chunk metadata's limit follows the attached Knowledge Base's store (1 KB on S3 Vectors).
        assert variables["VECTOR_STORE"] == {"Fn::GetAtt": ["Inspection", "VectorStoreType"]}
        # The data source's own KMS key (its ingestion's transient data): the function may use it.
        key_grants = [
            statement
            for policy in resources(template, "AWS::IAM::Policy").values()
            if "TransformRole" in flat(policy["Properties"]["Roles"])
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]
            if {"Fn::GetAtt": ["Inspection", "DataSourceKmsKeyArn"]} in as_list(statement["Resource"])
        ]
        assert [sorted(as_list(s["Action"])) for s in key_grants] == [["kms:Decrypt", "kms:GenerateDataKey"]]


def test_attach_mode_has_its_own_default_stack_name() -> None:
    """A deploy in attach mode must never update the full stack (whose Knowledge Base it would delete)."""
    from contextual_kb.cdk.config import load

    assert load(ATTACH).stack_name == "ContextualKbAttached"
    assert load({**ATTACH, "stackName": "TeamDocsContext"}).stack_name == "TeamDocsContext"
    assert load({}).stack_name == "ContextualKb"


def test_the_outputs_are_what_ckb_reads(attached: dict[str, tuple[Path, dict[str, Any]]]) -> None:
    _, template = attached["new-bucket"]
    outputs = template["Outputs"]
    for name in (
        "KnowledgeBaseId",
        "DataSourceId",
        "SourceBucketName",
        "IntermediateBucketName",
        "TransformFunctionName",
        "TransformFunctionArn",
        "VectorStoreType",
        "KnowledgeBaseRoleArn",
        "KnowledgeBasePolicyName",
        "StackMode",
        "AlarmTopicArn",
        "IngestionLogGroupName",
    ):
        assert name in outputs, name
    assert outputs["StackMode"]["Value"] == "attach"
    assert outputs["SourceBucketName"]["Value"] == {"Fn::GetAtt": ["Inspection", "SourceBucketName"]}
    assert outputs["RdsMetadataColumns"]["Value"] == {"Fn::GetAtt": ["Inspection", "MetadataColumns"]}


def test_the_inspection_is_told_the_functions_metadata_key_and_whether_aurora_columns_were_added(
    attached: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """An Aurora table with no custom metadata field needs a column per attribute: the inspection names them
    (the context's key as the function has it) and refuses until rdsMetadataColumns says they are there."""
    for variant, key, confirmed in (
        ("new-bucket", "ckb_context", "false"),
        ("their-bucket", "team_context", "true"),
    ):
        _, template = attached[variant]
        (inspection,) = [
            r for r in template["Resources"].values() if r["Type"] == "Custom::DataSourceInspection"
        ]
        assert inspection["Properties"]["ContextMetadataKey"] == key
        assert inspection["Properties"]["RdsMetadataColumns"] == confirmed


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"knowledgeBaseId": "KBEXIST001"}, "needs dataSourceId, knowledgeBaseRoleArn too"),
        ({**ATTACH, "knowledgeBaseId": "kb-1"}, "knowledgeBaseId"),
        ({**ATTACH, "knowledgeBaseRoleArn": "AmazonBedrockExecutionRole"}, "knowledgeBaseRoleArn"),
        ({**ATTACH, "vectorStore": "s3vectors"}, "vectorStore: the attached Knowledge Base keeps its own"),
        ({**ATTACH, "chunking": "none"}, "chunking: the attached Knowledge Base keeps its own"),
        ({**ATTACH, "functionEnvironment": {"CHUNKING": "kb"}}, "the stack sets it from the data source"),
        ({**ATTACH, "intermediateBucketName": "b-1", "kmsKey": True}, "give the bucket's key as"),
        (
            {**ATTACH, "intermediateKmsKeyArn": "arn:aws:kms:us-east-1:123456789012:key/x"},
            "without intermediateBucketName",
        ),
        ({"replaceTransformation": True}, "replaceTransformation applies only when attaching"),
        ({"rdsMetadataColumns": True}, "rdsMetadataColumns applies only when attaching"),
        ({"intermediateBucketName": "b-1"}, "intermediateBucketName applies only when attaching"),
    ],
)
def test_attach_settings_that_cannot_work_fail_synth_in_one_line(
    context: dict[str, Any], message: str
) -> None:
    from contextual_kb.cdk.config import ConfigError, load

    with pytest.raises(ConfigError, match=message) as caught:
        load(context)
    assert "\n" not in str(caught.value)


def test_the_inspection_checks_the_data_sources_key_for_the_function_role_and_says_it_as_an_output(
    attached: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """The inspection is given the function's role, may read key policies of this account's keys in this
    region (and do nothing else with a key), and its one line on the data source's key is a stack output."""
    _, template = attached["new-bucket"]
    (inspection,) = resources(template, "Custom::DataSourceInspection").values()
    role = inspection["Properties"]["FunctionRoleArn"]
    assert role["Fn::GetAtt"][0].startswith("TransformRole") and role["Fn::GetAtt"][1] == "Arn"
    (policy,) = [
        r["Properties"]
        for k, r in resources(template, "AWS::IAM::Policy").items()
        if k.startswith("AttachRole")
    ]
    kms = [s for s in policy["PolicyDocument"]["Statement"] if any("kms:" in a for a in as_list(s["Action"]))]
    (statement,) = kms
    assert as_list(statement["Action"]) == ["kms:GetKeyPolicy"]
    assert flat(statement["Resource"]).endswith(':key/*"]]}') and "AWS::AccountId" in flat(
        statement["Resource"]
    )
    output = template["Outputs"]["DataSourceKeyCheck"]["Value"]
    (inspection_id,) = resources(template, "Custom::DataSourceInspection")
    assert output == {"Fn::GetAtt": [inspection_id, "DataSourceKeyCheck"]}
