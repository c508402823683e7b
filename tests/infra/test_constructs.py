"""The public constructs (contextual_kb.cdk) in a user's own app: the three ways to join a data source, what
they leave alone (chunking, parsing: an update, not a replacement), and what fails at synth, one line each."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_bedrock as bedrock
from aws_cdk.assertions import Annotations, Match, Template

from contextual_kb.cdk import ConfigError, ContextualTransformation, bundling
from tests.conftest import ROOT
from tests.infra.conftest import NO_BUNDLING, resources
from tests.infra.replacement import name_collisions, replaced
from tests.user_apps import alpha_app, l1_app


def synth(build: Any, **options: Any) -> dict[str, Any]:
    app = cdk.App(context=NO_BUNDLING)
    stack = build(app, **options)
    app.synth()  # the construct's checks and cdk-nag (AwsSolutions): a finding or a bad input raises here
    return Template.from_stack(stack).to_json()


def synth_errors(build: Any, **options: Any) -> list[str]:
    """The error annotations a synth leaves (``cdk synth`` prints each as one line and fails)."""
    app = cdk.App(context=NO_BUNDLING)
    stack = build(app, **options)
    app.synth()
    found = Annotations.from_stack(stack).find_error("*", Match.any_value())
    return [f"{message.id}: {message.entry.data}" for message in found]


def synth_error(build: Any, **options: Any) -> str:
    return "\n".join(synth_errors(build, **options))


def data_source(template: dict[str, Any]) -> dict[str, Any]:
    (source,) = resources(template, "AWS::Bedrock::DataSource").values()
    return source["Properties"]


def function_id(template: dict[str, Any]) -> str:
    (found,) = [
        name
        for name, r in resources(template, "AWS::Lambda::Function").items()
        if r["Properties"].get("Handler") == "contextual_kb.runtime.handler.lambda_handler"
    ]
    return found


@pytest.fixture(scope="module")
def apps() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Each user app without contextual retrieval and with it."""
    return {
        name: (synth(build, contextual=False), synth(build))
        for name, build in (("alpha", alpha_app.build), ("l1", l1_app.build))
    }


@pytest.mark.parametrize("name", ["alpha", "l1"])
def test_the_data_source_runs_the_function_with_its_own_chunking_kept(apps: Any, name: str) -> None:
    before, after = apps[name]
    ingestion = data_source(after)["VectorIngestionConfiguration"]
    assert (
        ingestion["ChunkingConfiguration"]
        == data_source(before)["VectorIngestionConfiguration"]["ChunkingConfiguration"]
    )
    (step,) = ingestion["CustomTransformationConfiguration"]["Transformations"]
    assert step["StepToApply"] == "POST_CHUNKING"
    lambda_arn = step["TransformationFunction"]["TransformationLambdaConfiguration"]["LambdaArn"]
    assert lambda_arn == {"Fn::GetAtt": [function_id(after), "Arn"]}


@pytest.mark.parametrize("name", ["alpha", "l1"])
def test_the_knowledge_base_role_may_invoke_the_function_and_use_the_bucket(apps: Any, name: str) -> None:
    _, after = apps[name]
    granted = [
        statement
        for policy in resources(after, "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == "lambda:InvokeFunction"
    ]
    (invoke,) = granted
    assert {"Fn::GetAtt": [function_id(after), "Arn"]} in invoke["Resource"]
    (kb,) = resources(after, "AWS::Bedrock::KnowledgeBase").values()
    policies = [
        p
        for p in resources(after, "AWS::IAM::Policy").values()
        if invoke in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    (policy,) = policies
    # the policy is on the Knowledge Base's own role
    assert [{"Ref": role} for role in [kb["Properties"]["RoleArn"]["Fn::GetAtt"][0]]] == policy["Properties"][
        "Roles"
    ]


@pytest.mark.parametrize("name", ["alpha", "l1"])
def test_adding_it_to_an_existing_data_source_is_an_update_not_a_replacement(apps: Any, name: str) -> None:
    """CustomTransformationConfiguration is updated in place; chunking and parsing (create-only: a replaced
    data source re-ingests everything) are left exactly as they were."""
    before, after = apps[name]
    assert replaced(before, after) == {}
    assert name_collisions(before, after) == {}
    (source,) = resources(before, "AWS::Bedrock::DataSource")
    assert source in resources(after, "AWS::Bedrock::DataSource")  # the same logical ID: updated


def test_the_replacement_rule_would_catch_a_chunking_change(apps: Any) -> None:
    before, after = apps["l1"]
    changed = {**after, "Resources": {**after["Resources"]}}
    (name,) = resources(after, "AWS::Bedrock::DataSource")
    source = changed["Resources"][name] = {**after["Resources"][name]}
    source["Properties"] = {
        **source["Properties"],
        "VectorIngestionConfiguration": {"ChunkingConfiguration": {"ChunkingStrategy": "NONE"}},
    }
    assert name in replaced(before, changed)


@pytest.mark.parametrize("kind", ["CUSTOM", "MANAGED_KNOWLEDGE_BASE_CONNECTOR", "REDSHIFT_METADATA"])
def test_a_data_source_type_that_takes_no_transformation_fails_at_synth(kind: str) -> None:
    error = synth_error(l1_app.build, source_type=kind)
    assert f"UserL1Kb/Source: a data source of type {kind} takes no custom transformation" in error


def test_a_knowledge_base_that_is_not_vector_fails_at_synth() -> None:
    error = synth_error(l1_app.build, kind="KENDRA")
    assert "UserL1Kb/Source: a KENDRA Knowledge Base runs no custom transformation (VECTOR only)" in error


def other_transformation(app: cdk.App) -> cdk.Stack:
    stack = cdk.Stack(app, "Other")
    source = bedrock.CfnDataSource(
        stack,
        "Source",
        knowledge_base_id="KB12345678",
        name="docs",
        data_source_configuration={"type": "S3", "s3Configuration": {"bucketArn": l1_app.DOCS_BUCKET}},
        vector_ingestion_configuration={
            "customTransformationConfiguration": {
                "intermediateStorage": {"s3Location": {"uri": "s3://theirs/"}},
                "transformations": [
                    {
                        "stepToApply": "POST_CHUNKING",
                        "transformationFunction": {
                            "transformationLambdaConfiguration": {
                                "lambdaArn": "arn:aws:lambda:us-east-1:123456789012:function:theirs"
                            }
                        },
                    }
                ],
            }
        },
    )
    source.with_(ContextualTransformation(stack, "Contextual").mixin())
    return stack


def test_a_data_source_with_another_transformation_fails_at_synth_and_is_left_alone() -> None:
    error = synth_error(other_transformation)
    assert "/Other/Source: the data source already has a custom transformation" in error
    app = cdk.App(context=NO_BUNDLING)
    stack = other_transformation(app)
    app.synth()
    (step,) = data_source(Template.from_stack(stack).to_json())["VectorIngestionConfiguration"][
        "CustomTransformationConfiguration"
    ]["Transformations"]
    assert step["TransformationFunction"]["TransformationLambdaConfiguration"]["LambdaArn"].endswith(
        ":theirs"
    )
    app = cdk.App(context=NO_BUNDLING)
    stack = cdk.Stack(app, "Value")
    transformation = ContextualTransformation(stack, "Contextual")
    with pytest.raises(ConfigError, match="already has a custom transformation"):
        transformation.vector_ingestion_configuration({"customTransformationConfiguration": {"x": 1}})


@pytest.mark.parametrize(
    "model",
    ["amazon.nova-pro-v1:0", "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a"],
)
def test_a_model_the_function_cannot_call_fails_in_one_line(model: str) -> None:
    app = cdk.App(context=NO_BUNDLING)
    stack = cdk.Stack(app, "Model")
    with pytest.raises(ConfigError) as caught:
        ContextualTransformation(stack, "Contextual", settings={"functionEnvironment": {"MODEL_ID": model}})
    assert "\n" not in str(caught.value)
    assert f"MODEL_ID={model}: the function calls Anthropic Claude models" in str(caught.value)


def test_settings_are_validated_as_context_values_are() -> None:
    app = cdk.App(context=NO_BUNDLING)
    stack = cdk.Stack(app, "Settings")
    with pytest.raises(ConfigError, match="CDK context functionTimeoutSeconds"):
        ContextualTransformation(stack, "Contextual", settings={"functionTimeoutSeconds": 5})


def test_every_error_is_one_line_each(apps: Any) -> None:
    errors = synth_errors(l1_app.build, source_type="CUSTOM", kind="KENDRA")
    assert sorted(errors) == [
        "/UserL1Kb/Source: a KENDRA Knowledge Base runs no custom transformation (VECTOR only)",
        "/UserL1Kb/Source: a data source of type CUSTOM takes no custom transformation",
    ]
    assert synth_errors(l1_app.build) == []


def test_the_shipped_requirements_are_the_projects() -> None:
    """The asset is built from files in the package (a user has no repository): they must say what the
    project pins."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = dict(
        line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line
    )
    pins = {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in pins.items()}
    assert bundling.runtime_requirements() == bundling.requirements_of(project["dependencies"], pins)
    assert bundling.CONSTRAINTS.read_bytes() == (ROOT / "constraints.txt").read_bytes()
    assert Path(bundling.__file__).parent.parent == ROOT / "lambda" / "contextual_kb"


@pytest.mark.parametrize("example", ["path_metadata", "redact_emails"])
def test_an_examples_handler_is_the_functions(example: str) -> None:
    """``handler_file``: the module in the asset's inputs, the function running its ``handler``."""
    from contextual_kb.cdk import ContextualKnowledgeBase

    app = cdk.App(context=NO_BUNDLING)
    stack = cdk.Stack(app, "Example")
    handler = ROOT / "examples" / example / "handler.py"
    parts = ContextualKnowledgeBase(
        stack, "Default", settings={"vectorStore": "s3vectors"}, handler_file=handler
    )
    app.synth()
    template = Template.from_stack(stack).to_json()
    assert resources(template, "AWS::Lambda::Function")[function_id_of(template, "handler.handler")]
    inputs = bundling._inputs(((handler.name, handler.read_bytes()),))
    assert inputs[f"{bundling.HANDLER_MODULES}/handler.py"] == handler.read_bytes()
    assert parts.transform.function.node.default_child is not None


def function_id_of(template: dict[str, Any], handler: str) -> str:
    (found,) = [
        name
        for name, r in resources(template, "AWS::Lambda::Function").items()
        if r["Properties"].get("Handler") == handler
    ]
    return found


def test_a_handler_file_that_is_not_a_module_fails_in_one_line(tmp_path: Path) -> None:
    app = cdk.App(context=NO_BUNDLING)
    stack = cdk.Stack(app, "Handler")
    with pytest.raises(ConfigError, match="not a Python module"):
        ContextualTransformation(stack, "Contextual", handler_file=tmp_path / "missing.py")


def test_the_mixin_keeps_chunking_and_parsing_given_as_cdk_structs() -> None:
    """A data source whose configuration is given as CDK's property classes (not dicts): chunking and parsing
    come out exactly as without the construct, with the transformation beside them."""

    def app_with(contextual: bool) -> dict[str, Any]:
        app = cdk.App(context=NO_BUNDLING)
        stack = cdk.Stack(app, "Structs")
        source = bedrock.CfnDataSource(
            stack,
            "Source",
            knowledge_base_id="KB12345678",
            name="docs",
            data_source_configuration=bedrock.CfnDataSource.DataSourceConfigurationProperty(
                type="S3",
                s3_configuration=bedrock.CfnDataSource.S3DataSourceConfigurationProperty(
                    bucket_arn=l1_app.DOCS_BUCKET
                ),
            ),
            vector_ingestion_configuration=bedrock.CfnDataSource.VectorIngestionConfigurationProperty(
                chunking_configuration=bedrock.CfnDataSource.ChunkingConfigurationProperty(
                    chunking_strategy="NONE"
                ),
                parsing_configuration=bedrock.CfnDataSource.ParsingConfigurationProperty(
                    parsing_strategy="BEDROCK_DATA_AUTOMATION"
                ),
            ),
        )
        if contextual:
            source.with_(ContextualTransformation(stack, "Contextual").mixin())
        app.synth()
        return Template.from_stack(stack).to_json()

    before, after = app_with(False), app_with(True)
    kept = data_source(before)["VectorIngestionConfiguration"]
    ingestion = data_source(after)["VectorIngestionConfiguration"]
    assert {k: v for k, v in ingestion.items() if k != "CustomTransformationConfiguration"} == kept
    assert kept.keys() == {"ChunkingConfiguration", "ParsingConfiguration"}
    assert (
        ingestion["CustomTransformationConfiguration"]["Transformations"][0]["StepToApply"] == "POST_CHUNKING"
    )
    assert replaced(before, after) == {}


def test_the_asset_names_nothing_of_the_python_that_built_it(tmp_path: Path) -> None:
    """No RECORD line of a file outside the asset (the console scripts, whose first line is the building
    interpreter's path): the same inputs give the same bytes in a user's venv and in this checkout
    (tests/packaging compares the two whole)."""
    bundling.build(tmp_path, "arm64")
    outside = [
        f"{record.parent.name}: {line}"
        for record in tmp_path.glob("*.dist-info/RECORD")
        for line in record.read_text().splitlines()
        if line.startswith("../")
    ]
    assert outside == []
    assert sys.executable.encode() not in b"".join(p.read_bytes() for p in tmp_path.rglob("RECORD"))
