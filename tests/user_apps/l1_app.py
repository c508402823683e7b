"""A user's own CDK app, all L1: ``CfnKnowledgeBase``, ``CfnDataSource`` and its role, and contextual
retrieval added as the data source's ``vector_ingestion_configuration`` value and a grant to the role."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_bedrock as bedrock
from aws_cdk import aws_iam as iam
from aws_cdk import aws_opensearchserverless as aoss

EMBEDDING = f"arn:{cdk.Aws.PARTITION}:bedrock:{cdk.Aws.REGION}::foundation-model/amazon.titan-embed-text-v2:0"
CHUNKING = {
    "chunkingStrategy": "SEMANTIC",
    "semanticChunkingConfiguration": {"maxTokens": 300, "bufferSize": 0, "breakpointPercentileThreshold": 95},
}
DOCS_BUCKET = "arn:aws:s3:::user-documents"


def build(
    app: cdk.App,
    *,
    contextual: bool = True,
    settings: dict[str, Any] | None = None,
    kind: str = "VECTOR",
    source_type: str = "S3",
) -> cdk.Stack:
    stack = cdk.Stack(app, "UserL1Kb")
    role = iam.Role(stack, "KbRole", assumed_by=iam.ServicePrincipal("bedrock.amazonaws.com"))
    collection = aoss.CfnCollection(stack, "Vectors", name="user-l1-kb", type="VECTORSEARCH")
    kb = bedrock.CfnKnowledgeBase(
        stack,
        "Kb",
        name="user-l1-kb",
        role_arn=role.role_arn,
        knowledge_base_configuration={
            "type": kind,
            "vectorKnowledgeBaseConfiguration": {"embeddingModelArn": EMBEDDING},
        },
        storage_configuration={
            "type": "OPENSEARCH_SERVERLESS",
            "opensearchServerlessConfiguration": {
                "collectionArn": collection.attr_arn,
                "vectorIndexName": "index",
                "fieldMapping": {"vectorField": "vector", "textField": "text", "metadataField": "metadata"},
            },
        },
    )
    ingestion: dict[str, Any] = {"chunkingConfiguration": CHUNKING}
    if contextual:
        from contextual_kb.cdk import ContextualTransformation

        contextual_retrieval = ContextualTransformation(stack, "Contextual", settings=settings)
        ingestion = contextual_retrieval.vector_ingestion_configuration(ingestion)
        contextual_retrieval.grant(role)
    bedrock.CfnDataSource(
        stack,
        "Source",
        knowledge_base_id=kb.attr_knowledge_base_id,
        name="docs",
        data_source_configuration={"type": source_type, "s3Configuration": {"bucketArn": DOCS_BUCKET}},
        vector_ingestion_configuration=ingestion,
    )
    # -c userNag=off: an aws-cdk-lib below cdk-nag 3's floor, 2.257; -c userNag=2: cdk-nag 2, an aspect
    # (tests/packaging/test_ends.py)
    nag = app.node.try_get_context("userNag")
    if nag == "2":
        from cdk_nag import AwsSolutionsChecks

        cdk.Aspects.of(app).add(AwsSolutionsChecks())
    elif nag != "off":
        from cdk_nag import AwsSolutionsChecks

        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return stack


if __name__ == "__main__":
    from contextual_kb.cdk import setting_names

    application = cdk.App()
    given = {key: application.node.try_get_context(key) for key in setting_names()}  # -c name=value
    build(
        application,
        settings={key: value for key, value in given.items() if value is not None},
        # a bad input for tests/packaging: what `cdk synth` prints for it
        source_type=application.node.try_get_context("userSourceType") or "S3",
    )
    application.synth()
