"""Where the Knowledge Base keeps its vectors: OpenSearch Serverless (hybrid search) or S3 Vectors.

OpenSearch Serverless: a VECTORSEARCH collection with its encryption, network and data-access policies, and
the vector index, created by a custom resource through the OpenSearch API (``contextual_kb/resources/
opensearch_index.py``): ``AWS::OpenSearchServerless::Index`` takes analyzers by built-in name only, and the
text field's analysis is ours in full (``contextual_kb/query/index_definition.py``: the same definition
``ckb eval``'s ``index`` rows use). The custom resource's role may create, describe, update and delete the
index; the Knowledge Base's role may describe it and read and write its documents. The index's name holds
a hash of its body: a change of analysis creates a new index (the old one is deleted after), and, since the
Knowledge Base's storage configuration then changes, a new Knowledge Base, which needs a sync.

S3 Vectors: a vector bucket and index; Bedrock's text and metadata keys are non-filterable (filterable
metadata is capped at 2 KB a vector, and an index cannot be changed after creation). With a KMS key, the
key's policy lets S3 Vectors' indexing service use it (s3-vectors-data-encryption.html).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from aws_cdk import Aws, CustomResource, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_opensearchserverless as aoss
from aws_cdk import aws_s3vectors as s3vectors
from aws_cdk import custom_resources as cr
from constructs import Construct

from contextual_kb.cdk import nag, naming
from contextual_kb.cdk.logs import logs_statement, month_of_logs
from contextual_kb.query.index_definition import (
    METADATA_FIELD,
    TEXT_FIELD,
    VECTOR_FIELD,
    index_body,
    index_name,
)

S3_VECTORS_NON_FILTERABLE = ["AMAZON_BEDROCK_TEXT", "AMAZON_BEDROCK_METADATA"]
INDEX_HANDLER = "contextual_kb.resources.opensearch_index.on_event"
# What each principal may do in the collection's data access policy.
INDEX_MANAGER_PERMISSIONS = ["aoss:CreateIndex", "aoss:DescribeIndex", "aoss:UpdateIndex", "aoss:DeleteIndex"]
KB_PERMISSIONS = ["aoss:DescribeIndex", "aoss:ReadDocument", "aoss:WriteDocument"]


@dataclass(frozen=True)
class StorageConfiguration:
    """The KB's ``storageConfiguration``, what its role needs to use it, and what identifies the store (a
    change of it replaces the Knowledge Base)."""

    configuration: dict[str, object]
    statements: list[iam.PolicyStatement]
    identity: str


class OpenSearchVectorStore(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        dimension: int,
        kb_role: iam.IRole,
        key: kms.IKey | None,
        resources_code: lambda_.Code,
        standby_replicas: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        # Collection names: unique in the account and region; policy names 3-32 characters (naming.py).
        name = naming.collection_name(
            naming.stack_name_of(stack), standby_replicas=standby_replicas, customer_key=key is not None
        )
        # The policies cover this stack's collection under each of its names (one replaces the other when
        # standby replicas or the key change; CloudFormation creates the new one before it deletes the old).
        names = naming.collection_names(naming.stack_name_of(stack))
        resource = [f"collection/{n}" for n in names]
        encryption = {"Rules": [{"ResourceType": "collection", "Resource": resource}]}
        encryption |= {"KmsARN": key.key_arn} if key else {"AWSOwnedKey": True}
        encryption_policy = aoss.CfnSecurityPolicy(
            self,
            "Encryption",
            name=naming.policy_name(naming.stack_name_of(stack), "enc"),
            type="encryption",
            policy=stack.to_json_string(encryption),
        )
        # Reached over HTTPS with IAM (SigV4) authentication and the data-access policy below; Bedrock and
        # the index's custom resource reach it from AWS's network.
        network_policy = aoss.CfnSecurityPolicy(
            self,
            "Network",
            name=naming.policy_name(naming.stack_name_of(stack), "net"),
            type="network",
            policy=json.dumps(
                [{"Rules": [{"ResourceType": "collection", "Resource": resource}], "AllowFromPublic": True}]
            ),
        )
        self.collection = aoss.CfnCollection(
            self,
            "Collection",
            name=name,
            type="VECTORSEARCH",
            standby_replicas="ENABLED" if standby_replicas else "DISABLED",
        )
        # No tags in the collection's template: its Tags are create-only (CloudFormation schema) and its name
        # is ours, so a tag added after the deploy (Tags.of(app).add, an aspect) would ask CloudFormation to
        # replace it under the same name, which fails the update. The tags it is given go on through the API
        # instead (CollectionTags, below), in place.
        self.collection.add_property_deletion_override("Tags")
        self.collection.node.add_dependency(encryption_policy)
        self.collection.node.add_dependency(network_policy)

        # The index's custom resource: its own function and role.
        self.index_log_group = month_of_logs(self, "IndexLogs")
        self.index_role = iam.Role(self, "IndexRole", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        self.index_role.add_to_policy(logs_statement(self.index_role, self.index_log_group))
        # Data-plane calls need this IAM permission as well as the data access policy (AWS's documentation).
        self.index_role.add_to_policy(
            iam.PolicyStatement(actions=["aoss:APIAccessAll"], resources=[self.collection.attr_arn])
        )
        collection_rule = {
            "ResourceType": "collection",
            "Resource": resource,
            "Permission": ["aoss:DescribeCollectionItems"],
        }
        self.access = aoss.CfnAccessPolicy(
            self,
            "Access",
            name=naming.policy_name(naming.stack_name_of(stack), "access"),
            type="data",
            policy=stack.to_json_string(
                [
                    {
                        "Description": "The index's custom resource creates, replaces and deletes the index.",
                        "Rules": [
                            collection_rule,
                            {
                                "ResourceType": "index",
                                "Resource": [f"index/{n}/*" for n in names],
                                "Permission": INDEX_MANAGER_PERMISSIONS,
                            },
                        ],
                        "Principal": [self.index_role.role_arn],
                    },
                    {
                        "Description": "The Knowledge Base reads and writes vectors and chunks.",
                        "Rules": [
                            collection_rule,
                            {
                                "ResourceType": "index",
                                "Resource": [f"index/{n}/*" for n in names],
                                "Permission": KB_PERMISSIONS,
                            },
                        ],
                        "Principal": [kb_role.role_arn],
                    },
                ]
            ),
        )
        self.index_function = lambda_.Function(
            self,
            "IndexFunction",
            description=f"{stack.stack_name}: creates the Knowledge Base's vector index with its analysis",
            runtime=lambda_.Runtime.PYTHON_3_13,
            architecture=lambda_.Architecture.ARM_64,
            handler=INDEX_HANDLER,
            code=resources_code,
            timeout=Duration.minutes(14),  # the Provider framework's own limit is 15 minutes
            memory_size=256,
            role=self.index_role,
            log_group=self.index_log_group,
        )
        self.provider_log_group = month_of_logs(self, "ProviderLogs")
        self.provider = cr.Provider(
            self, "IndexProvider", on_event_handler=self.index_function, log_group=self.provider_log_group
        )
        nag.ack(
            self.index_function,
            "L1",
            "Python 3.13, like the transformation function: the index's custom resource is tested on it.",
        )
        nag.ack(
            self.provider,
            "IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            "CDK's custom-resource Provider framework gives its function this managed policy (logs only).",
        )
        nag.ack_resources(
            self.provider,
            "The Provider framework may invoke any version of the index's function (CDK's own grant).",
            [f"{self.index_function.function_arn}:*"],
        )
        body = index_body(dimension)
        self.index_name = index_name(body)
        self.index = CustomResource(
            self,
            "Index",
            service_token=self.provider.service_token,
            resource_type="Custom::OpenSearchIndex",
            properties={
                "Endpoint": self.collection.attr_collection_endpoint,
                "IndexName": self.index_name,
                # A string: CloudFormation would turn the numbers and booleans of an object into strings.
                "Body": json.dumps(body, sort_keys=True),
            },
        )
        self.index.node.add_dependency(self.access)
        self.index.node.add_dependency(self.collection)
        # The collection's tags (those Tags.of(app) gave it, read once the tag aspects have run), set through
        # TagResource by the same function: in place, whatever changes (contextual_kb/resources/
        # collection_tags.py).
        self.index_role.add_to_policy(
            iam.PolicyStatement(
                actions=["aoss:TagResource", "aoss:UntagResource"],
                resources=[self.collection.attr_arn],
            )
        )
        collection = self.collection
        self.collection_tags = CustomResource(
            self,
            "CollectionTags",
            service_token=self.provider.service_token,
            resource_type="Custom::CollectionTags",
            properties={
                "CollectionArn": self.collection.attr_arn,
                "Tags": collection.tags.rendered_tags,  # resolved at synth, after the tag aspects
            },
        )
        self.storage = StorageConfiguration(
            configuration={
                "type": "OPENSEARCH_SERVERLESS",
                "opensearchServerlessConfiguration": {
                    "collectionArn": self.collection.attr_arn,
                    "vectorIndexName": self.index_name,
                    "fieldMapping": {
                        "vectorField": VECTOR_FIELD,
                        "textField": TEXT_FIELD,
                        "metadataField": METADATA_FIELD,
                    },
                },
            },
            statements=[
                iam.PolicyStatement(actions=["aoss:APIAccessAll"], resources=[self.collection.attr_arn]),
            ],
            # A new collection replaces the Knowledge Base too (AWS's defaults keep the identity it had).
            identity=f"opensearch:{self.index_name}"
            + ("" if standby_replicas else ":no-standby")
            + (":cmk" if key is not None else ""),
        )


class S3VectorStore(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, dimension: int, key: kms.IKey | None) -> None:
        super().__init__(scope, construct_id)
        encryption = {"sse_type": "aws:kms", "kms_key_arn": key.key_arn} if key else {"sse_type": "AES256"}
        if key is not None:
            # S3 Vectors indexes in the background with its own principal, which must be able to use the key
            # (s3-vectors-data-encryption.html), for this account's vector buckets only.
            buckets = f"arn:{Aws.PARTITION}:s3vectors:{Aws.REGION}:{Aws.ACCOUNT_ID}:bucket/*"
            key.add_to_resource_policy(
                iam.PolicyStatement(
                    actions=["kms:Decrypt"],
                    principals=[iam.ServicePrincipal("indexing.s3vectors.amazonaws.com")],
                    resources=["*"],  # in a key policy, "*" is this key
                    conditions={
                        "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                        "ArnLike": {"aws:SourceArn": buckets},
                        "ForAnyValue:StringEquals": {
                            "kms:EncryptionContextKeys": ["aws:s3vectors:arn", "aws:s3vectors:resource-id"]
                        },
                    },
                )
            )
        self.bucket = s3vectors.CfnVectorBucket(
            self,
            "Bucket",
            encryption_configuration=s3vectors.CfnVectorBucket.EncryptionConfigurationProperty(**encryption),
        )
        self.index = s3vectors.CfnIndex(
            self,
            "Index",
            vector_bucket_arn=self.bucket.attr_vector_bucket_arn,
            data_type="float32",
            dimension=dimension,
            distance_metric="cosine",
            metadata_configuration=s3vectors.CfnIndex.MetadataConfigurationProperty(
                non_filterable_metadata_keys=S3_VECTORS_NON_FILTERABLE
            ),
        )
        self.storage = StorageConfiguration(
            configuration={
                "type": "S3_VECTORS",
                "s3VectorsConfiguration": {"indexArn": self.index.attr_index_arn},
            },
            statements=[
                iam.PolicyStatement(
                    actions=[
                        "s3vectors:PutVectors",
                        "s3vectors:GetVectors",
                        "s3vectors:DeleteVectors",
                        "s3vectors:QueryVectors",
                        "s3vectors:GetIndex",
                    ],
                    resources=[self.index.attr_index_arn],
                )
            ],
            # The vector bucket's encryption is create-only: a key switched on or off replaces the bucket, its
            # index and so the Knowledge Base, which needs a new name (without a key: the name it had).
            identity=f"s3vectors:{dimension}" + (":cmk" if key is not None else ""),
        )
