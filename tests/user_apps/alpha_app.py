"""A user's own CDK app: an alpha ``KnowledgeBase``, an L1 ``CfnDataSource``, and contextual retrieval added
with a Mixin and a grant. Run as a script by the CDK CLI (tests/packaging), imported by tests/infra."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_bedrock as bedrock
from aws_cdk import aws_bedrock_alpha as alpha
from aws_cdk import aws_opensearchserverless as aoss
from aws_cdk import aws_s3 as s3

CHUNKING = {
    "chunkingStrategy": "FIXED_SIZE",
    "fixedSizeChunkingConfiguration": {"maxTokens": 300, "overlapPercentage": 20},
}


def build(app: cdk.App, *, contextual: bool = True, settings: dict[str, Any] | None = None) -> cdk.Stack:
    stack = cdk.Stack(app, "UserKb")
    docs = s3.Bucket(stack, "Docs", enforce_ssl=True, block_public_access=s3.BlockPublicAccess.BLOCK_ALL)
    cdk.Validations.of(docs).acknowledge(  # the user's own bucket, as they have it
        cdk.Acknowledgment(id="AwsSolutions::AwsSolutions-S1", reason="the user's own choice")
    )
    collection = aoss.CfnCollection(stack, "Vectors", name="user-kb", type="VECTORSEARCH")
    store = alpha.VectorStore.open_search_serverless(
        collection=collection,
        vector_index_name="index",
        vector_field="vector",
        text_field="text",
        metadata_field="metadata",
    )
    embeddings = alpha.BedrockFoundationModel.TITAN_EMBED_TEXT_V2_1024
    kb = alpha.KnowledgeBase(
        stack, "Kb", type=alpha.KnowledgeBaseType.vector(embeddings_model=embeddings, vector_store=store)
    )
    docs.grant_read(kb)
    for finding in (
        "Action::bedrock:InvokeModel*",
        "Action::s3:GetObject*",
        "Action::s3:GetBucket*",
        "Action::s3:List*",
        f"Resource::<{stack.get_logical_id(docs.node.default_child)}.Arn>/*",
    ):
        cdk.Validations.of(kb).acknowledge(  # the user's own grants (the alpha L2's and read of the bucket)
            cdk.Acknowledgment(
                id=f"AwsSolutions::AwsSolutions-IAM5[{finding}]", reason="the user's own choice"
            )
        )
    source = bedrock.CfnDataSource(
        stack,
        "Source",
        knowledge_base_id=kb.knowledge_base_id,
        name="docs",
        data_source_configuration={"type": "S3", "s3Configuration": {"bucketArn": docs.bucket_arn}},
        vector_ingestion_configuration={"chunkingConfiguration": CHUNKING},
    )
    if contextual:
        from contextual_kb.cdk import ContextualTransformation

        contextual_retrieval = ContextualTransformation(stack, "Contextual", settings=settings)
        source.with_(contextual_retrieval.mixin())
        contextual_retrieval.grant(kb)
    # -c userNag=off: an aws-cdk-lib below cdk-nag 3's floor, 2.257 (tests/packaging/test_ends.py)
    if app.node.try_get_context("userNag") != "off":
        from cdk_nag import AwsSolutionsChecks

        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return stack


if __name__ == "__main__":
    from contextual_kb.cdk import setting_names

    application = cdk.App()
    given = {key: application.node.try_get_context(key) for key in setting_names()}  # -c name=value
    build(application, settings={key: value for key, value in given.items() if value is not None})
    application.synth()
