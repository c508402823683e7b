"""The Knowledge Base, its service role, and the S3 data source whose ingestion runs our function as the
POST_CHUNKING transformation."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aws_cdk import Aws, Stack
from aws_cdk import aws_bedrock as bedrock
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from contextual_kb.cdk import nag, naming
from contextual_kb.cdk.config import StackConfig
from contextual_kb.cdk.vector_store import StorageConfiguration

if TYPE_CHECKING:
    from contextual_kb.cdk.transformation import ContextualTransformation


def chunking_configuration(config: StackConfig) -> dict[str, Any] | None:
    """The data source's chunking; None for the KB's default chunking."""
    if config.chunking == "fixed_size":
        return {
            "chunkingStrategy": "FIXED_SIZE",
            "fixedSizeChunkingConfiguration": {
                "maxTokens": config.chunk_max_tokens,
                "overlapPercentage": config.chunk_overlap_percentage,
            },
        }
    if config.chunking == "hierarchical":
        return {
            "chunkingStrategy": "HIERARCHICAL",
            "hierarchicalChunkingConfiguration": {
                "levelConfigurations": [
                    {"maxTokens": config.parent_max_tokens},
                    {"maxTokens": config.child_max_tokens},
                ],
                "overlapTokens": config.overlap_tokens,
            },
        }
    if config.chunking == "semantic":
        return {
            "chunkingStrategy": "SEMANTIC",
            "semanticChunkingConfiguration": {
                "maxTokens": config.semantic_max_tokens,
                "bufferSize": config.semantic_buffer_size,
                "breakpointPercentileThreshold": config.semantic_breakpoint_percentile,
            },
        }
    if config.chunking == "none":  # the function chunks whole documents (CHUNKING=structure)
        return {"chunkingStrategy": "NONE"}
    return None


class KnowledgeBase(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, config: StackConfig, role: iam.Role) -> None:
        super().__init__(scope, construct_id)
        self.role = role
        self.config = config
        self.embedding_model_arn = (
            f"arn:{Aws.PARTITION}:bedrock:{Aws.REGION}::foundation-model/{config.embedding_model_id}"
        )

    def build(
        self,
        *,
        storage: StorageConfiguration,
        source: s3.IBucket,
        transformation: ContextualTransformation,
        key: kms.IKey | None,
    ) -> None:
        """The KB and its data source, once the vector store exists (it needs the role first)."""
        config, role = self.config, self.role
        stack = Stack.of(self)
        role.add_to_policy(
            iam.PolicyStatement(actions=["bedrock:InvokeModel"], resources=[self.embedding_model_arn])
        )
        role.add_to_policy(iam.PolicyStatement(actions=["s3:ListBucket"], resources=[source.bucket_arn]))
        documents = source.arn_for_objects("*")
        role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[documents]))
        nag.ack_resources(
            role,
            "The KB reads every document of its source bucket: that is what a data source is.",
            [documents],
        )
        transformation.grant(role)
        for statement in storage.statements:
            role.add_to_policy(statement)
        # The name changes with what replaces the Knowledge Base (its vector store, index, embedding model),
        # so a replacement never collides with the old one's name while both exist.
        replaced_by = f"{storage.identity}|{config.embedding_model_id}|{config.embedding_dimension}"
        self.knowledge_base = bedrock.CfnKnowledgeBase(
            self,
            "KnowledgeBase",
            name=naming.bedrock_name(naming.stack_name_of(stack), f"-kb-{naming.short_hash(replaced_by)}"),
            description="Contextual retrieval: chunks contextualized before embedding and indexing",
            role_arn=role.role_arn,
            knowledge_base_configuration={
                "type": "VECTOR",
                "vectorKnowledgeBaseConfiguration": {
                    "embeddingModelArn": self.embedding_model_arn,
                    "embeddingModelConfiguration": {
                        "bedrockEmbeddingModelConfiguration": {
                            "dimensions": config.embedding_dimension,
                            "embeddingDataType": "FLOAT32",
                        }
                    },
                },
            },
            storage_configuration=storage.configuration,
        )
        self.knowledge_base.node.add_dependency(role)
        chunking = chunking_configuration(config)
        ingestion = transformation.vector_ingestion_configuration(
            {"chunkingConfiguration": chunking} if chunking is not None else None
        )
        # A data source's chunking and knowledge base cannot change: CloudFormation replaces it, creating the
        # new one before deleting the old, and cannot under the same name; so the name changes with the
        # chunking and with what replaces the Knowledge Base (a data source's name is not create-only: a
        # stack deployed before renames it in place).
        chunked_by = json.dumps(chunking, sort_keys=True)
        source_of = naming.short_hash(f"{replaced_by}|{chunked_by}")
        self.data_source = bedrock.CfnDataSource(
            self,
            "DataSource",
            knowledge_base_id=self.knowledge_base.attr_knowledge_base_id,
            name=naming.bedrock_name(naming.stack_name_of(stack), f"-source-{source_of}"),
            data_source_configuration={"type": "S3", "s3Configuration": {"bucketArn": source.bucket_arn}},
            vector_ingestion_configuration=ingestion,
            server_side_encryption_configuration={"kmsKeyArn": key.key_arn} if key else None,
        )


def knowledge_base_role(scope: Construct) -> iam.Role:
    """Assumable by Bedrock only, for knowledge bases of this account and region."""
    return iam.Role(
        scope,
        "KnowledgeBaseRole",
        assumed_by=iam.ServicePrincipal(
            "bedrock.amazonaws.com",
            conditions={
                "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                "ArnLike": {
                    "aws:SourceArn": (
                        f"arn:{Aws.PARTITION}:bedrock:{Aws.REGION}:{Aws.ACCOUNT_ID}:knowledge-base/*"
                    )
                },
            },
        ),
    )
