"""The constructs in the layouts a user's app has and ours does not: a role imported by ARN, a bucket or a
Knowledge Base role of another stack, an explicit environment. Each synthesizes with cdk-nag (AwsSolutions)
in the app, as a user runs it (an unacknowledged finding of ours fails the synth), and passes cfn-lint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_bedrock as bedrock
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from contextual_kb.cdk import ContextualKnowledgeBase, ContextualTransformation, nag
from tests.infra.conftest import NO_BUNDLING, cfn_lint, resources

ENV = cdk.Environment(account="123456789012", region="eu-west-1")
MODELS = "arn:aws:bedrock:eu-west-1::foundation-model"
INDEX = "arn:aws:s3vectors:eu-west-1:123456789012:bucket/v/index/i"


def checked_app() -> cdk.App:
    app = cdk.App(context=NO_BUNDLING)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


def user_bucket(stack: cdk.Stack, name: str) -> s3.Bucket:
    """A user's bucket, its own findings acknowledged as the user has them (not ours to answer)."""
    bucket = s3.Bucket(stack, name, enforce_ssl=True, block_public_access=s3.BlockPublicAccess.BLOCK_ALL)
    nag.ack(bucket, "S1", "the user's own choice")
    return bucket


def data_source(stack: cdk.Stack, knowledge_base_id: str, transformation: ContextualTransformation) -> None:
    bucket = user_bucket(stack, "Docs")
    bedrock.CfnDataSource(
        stack,
        "Source",
        knowledge_base_id=knowledge_base_id,
        name="docs",
        data_source_configuration={"type": "S3", "s3Configuration": {"bucketArn": bucket.bucket_arn}},
    ).with_(transformation.mixin())


def written(app: cdk.App, folder: Path, *stacks: cdk.Stack) -> list[Path]:
    app.synth()  # cdk-nag runs here: a finding nobody acknowledged raises
    paths = []
    for stack in stacks:
        path = folder / f"{stack.stack_name}.json"
        path.write_text(json.dumps(Template.from_stack(stack).to_json()))
        paths.append(path)
    return paths


def lint_clean(paths: list[Path]) -> None:
    result = cfn_lint(paths)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_grant_to_an_imported_role_passes_the_users_cdk_nag(tmp_path: Path) -> None:
    app = checked_app()
    stack = cdk.Stack(app, "Imported")
    transformation = ContextualTransformation(stack, "Contextual")
    role = iam.Role.from_role_arn(stack, "KbRole", "arn:aws:iam::123456789012:role/kb-role", mutable=True)
    transformation.grant(role)
    data_source(stack, "KBID123456", transformation)
    lint_clean(written(app, tmp_path, stack))
    policies = resources(Template.from_stack(stack).to_json(), "AWS::IAM::Policy")
    (policy,) = [p for k, p in policies.items() if "KnowledgeBaseAccess" in k]
    assert policy["Properties"]["Roles"] == ["kb-role"]


def test_an_intermediate_bucket_of_another_stack_passes_cdk_nag(tmp_path: Path) -> None:
    app = checked_app()
    buckets = cdk.Stack(app, "Buckets")
    intermediate = user_bucket(buckets, "Intermediate")
    stack = cdk.Stack(app, "Transformation")
    transformation = ContextualTransformation(stack, "Contextual", intermediate_bucket=intermediate)
    data_source(stack, "KBID123456", transformation)
    paths = written(app, tmp_path, buckets, stack)
    assert "Fn::ImportValue" in paths[1].read_text()  # the layout is the one that failed: a cross-stack ARN
    lint_clean(paths)


def test_auto_contextualize_with_an_explicit_environment_passes_cdk_nag(tmp_path: Path) -> None:
    app = checked_app()
    stack = cdk.Stack(app, "Pinned", env=ENV)
    ContextualKnowledgeBase(
        stack, "Default", settings={"autoContextualize": "both", "vectorStore": "s3vectors"}
    )
    lint_clean(written(app, tmp_path, stack))


def test_a_grant_to_the_knowledge_base_role_of_another_stack_is_no_dependency_cycle(tmp_path: Path) -> None:
    app = checked_app()
    kb_stack = cdk.Stack(app, "KnowledgeBases")
    role = iam.Role(kb_stack, "KbRole", assumed_by=iam.ServicePrincipal("bedrock.amazonaws.com"))
    kb = bedrock.CfnKnowledgeBase(
        kb_stack,
        "Kb",
        name="kb",
        role_arn=role.role_arn,
        knowledge_base_configuration={
            "type": "VECTOR",
            "vectorKnowledgeBaseConfiguration": {
                "embeddingModelArn": f"{MODELS}/amazon.titan-embed-text-v2:0"
            },
        },
        storage_configuration={
            "type": "S3_VECTORS",
            "s3VectorsConfiguration": {"indexArn": INDEX},
        },
    )
    sources = cdk.Stack(app, "DataSources")
    transformation = ContextualTransformation(sources, "Contextual")
    transformation.grant(role)
    data_source(sources, kb.attr_knowledge_base_id, transformation)
    paths = written(app, tmp_path, kb_stack, sources)  # a DependencyCycle raised here
    lint_clean(paths)
    template: dict[str, Any] = json.loads(paths[1].read_text())
    (policy_id,) = [k for k in resources(template, "AWS::IAM::Policy") if "KnowledgeBaseAccess" in k]
    (source,) = resources(template, "AWS::Bedrock::DataSource").values()
    assert policy_id in source["DependsOn"]  # ingestion never runs before the role may invoke the function
    assert sources not in kb_stack.dependencies


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({"Fn::Join": ["", [{"Fn::GetAtt": ["B1", "Arn"]}, "/*"]]}, "<B1.Arn>/*"),
        ({"Fn::ImportValue": "Other:ExportsOutputFnGetAttB1Arn"}, "Other:ExportsOutputFnGetAttB1Arn"),
        ({"Fn::Sub": "arn:${AWS::Partition}:s3:::x/*"}, "arn:<AWS::Partition>:s3:::x/*"),
        ({"Ref": "AWS::Region"}, "<AWS::Region>"),
        (
            {"Fn::Select": [6, {"Fn::Split": [":", {"Ref": "M"}]}]},
            '{"Fn::Select":[6,{"Fn::Split":[":",{"Ref":"M"}]}]}',
        ),
    ],
)
def test_a_resource_is_named_as_cdk_nag_names_it(value: Any, named: str) -> None:
    assert nag.flatten(value) == named


def test_nag_knows_no_construct_and_the_library_never_imports_cdk_nag() -> None:
    """The acknowledgments are each construct's; nag.py is helpers over CDK's own Validations."""
    import ast

    package = Path(nag.__file__).parent
    imported = {
        node.module or ""
        for node in ast.walk(ast.parse(Path(nag.__file__).read_text()))
        if isinstance(node, ast.ImportFrom)
    }
    assert not [name for name in imported if name.startswith("contextual_kb")]
    for module in package.glob("*.py"):
        tree = ast.parse(module.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [n for n in names if n.startswith("cdk_nag")], module.name


def _named(scope: cdk.Stack) -> dict[str, Any]:
    """Every name the constructs give a resource of ``scope``, by logical ID."""
    template = Template.from_stack(scope).to_json()
    return {
        logical_id: resource["Properties"]["Name"]
        for logical_id, resource in template["Resources"].items()
        if "Name" in resource.get("Properties", {})
    }


def _ingestion_logs_of_a_token(unrelated: bool) -> dict[str, Any]:
    """A user's app whose IngestionLogs is given the Knowledge Base's id as a token (an attribute of their
    own Knowledge Base), with or without a bucket of its own before it."""
    from contextual_kb.cdk import IngestionLogs

    stack = cdk.Stack(cdk.App(context=NO_BUNDLING), "User")
    if unrelated:
        s3.Bucket(stack, "Unrelated")
    kb = bedrock.CfnKnowledgeBase(
        stack,
        "Kb",
        name="users-kb",
        role_arn="arn:aws:iam::123456789012:role/kb",
        knowledge_base_configuration={"type": "KENDRA"},
    )
    IngestionLogs(
        stack,
        "IngestionLogs",
        knowledge_base_arn=kb.attr_knowledge_base_arn,
        knowledge_base=kb.attr_knowledge_base_id,
    )
    return _named(stack)


def test_a_token_for_the_knowledge_base_names_the_delivery_source_the_same_after_an_unrelated_change() -> (
    None
):
    """A token's placeholder (``${Token[TOKEN.n]}``) is numbered in the order tokens are made: a name hashed
    from it changed when an unrelated bucket was added, a replacement of the delivery source for nothing."""
    before, after = _ingestion_logs_of_a_token(False), _ingestion_logs_of_a_token(True)
    assert before == after
    assert all("Token" not in json.dumps(name) for name in before.values())


def _nested_knowledge_base(unrelated: bool) -> dict[str, Any]:
    stack = cdk.Stack(cdk.App(context=NO_BUNDLING), "User")
    if unrelated:
        s3.Bucket(stack, "Unrelated")
    nested = cdk.NestedStack(stack, "Docs")
    ContextualKnowledgeBase(nested, "Default", settings={"vectorStore": "s3vectors"})
    return _named(nested)


def test_a_knowledge_base_in_a_nested_stack_keeps_its_names_after_an_unrelated_change() -> None:
    """A NestedStack's name is a token (its AWS::StackName): the names made from its placeholder string
    ('TokenTOKEN414-kb-...') changed when an unrelated bucket was added, replacing the Knowledge Base."""
    before, after = _nested_knowledge_base(False), _nested_knowledge_base(True)
    assert before == after
    assert all("Token" not in json.dumps(name) for name in before.values())
    assert {name for name in before.values() if isinstance(name, str) and name.startswith("User-Docs-kb-")}
