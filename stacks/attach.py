"""The attach mode: contextual retrieval for a Knowledge Base the user already has (``-c knowledgeBaseId=...
-c dataSourceId=... -c knowledgeBaseRoleArn=...``).

Deployed: the transformation function and its role, an intermediate bucket (or the user's,
``intermediateBucketName``), a policy on the Knowledge Base's own service role (invoke the function and its
versions; read and write the intermediate bucket; its KMS key when there is one), the function's dashboard
and alarms (notifying the stack's SNS topic, or the user's), the delivery of the Knowledge Base's own
ingestion logs to a log group of the stack (``contextual_kb/cdk/ingestion_logs.py``), and two custom resources
(``contextual_kb/resources/attach_data_source.py``): one reads the Knowledge Base and the data source and
refuses what cannot be attached, before anything is changed, and says whether the data source's key policy
lets the function's role use its key (output DataSourceKeyCheck); the other switches the data source to the
function, and on destroy puts back what was there. No Knowledge Base, vector store or source bucket is made.

Order: the inspection first (it gives the function its chunking: ``structure`` when the data source's is
NONE), then the function and the policy on the Knowledge Base's role, and only then the data source is
switched, so that its first sync finds everything it needs.
"""

from __future__ import annotations

from aws_cdk import Aws, CfnOutput, CfnResource, CustomResource, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import custom_resources as cr
from constructs import Construct

from contextual_kb.cdk import nag
from contextual_kb.cdk.alarm_topic import AlarmTopic
from contextual_kb.cdk.batch import BatchRole
from contextual_kb.cdk.bundling import resources_code
from contextual_kb.cdk.config import StackConfig
from contextual_kb.cdk.function import TransformFunction
from contextual_kb.cdk.ingestion_logs import IngestionLogs, delivery_source_name
from contextual_kb.cdk.logs import logs_statement, month_of_logs
from contextual_kb.cdk.monitoring import Monitoring
from contextual_kb.cdk.storage import Storage
from contextual_kb.cdk.transformation import transformation_statements

ATTACH_HANDLER = "contextual_kb.resources.attach_data_source.on_event"


class AttachStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StackConfig,
        code: lambda_.Code | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        assert config.knowledge_base_id and config.data_source_id and config.knowledge_base_role_arn
        self.config = config
        kb_id, ds_id = config.knowledge_base_id, config.data_source_id
        self.storage: Storage | None = None
        if config.intermediate_bucket_name:
            key = (
                kms.Key.from_key_arn(self, "IntermediateKey", config.intermediate_kms_key_arn)
                if (config.intermediate_kms_key_arn)
                else None
            )
            self.intermediate: s3.IBucket = s3.Bucket.from_bucket_attributes(
                self, "Intermediate", bucket_name=config.intermediate_bucket_name, encryption_key=key
            )
        else:
            self.storage = Storage(
                self,
                "Storage",
                kms_key=config.kms_key,
                expiration_days=config.intermediate_expiration_days,
                source=False,
            )
            self.intermediate = self.storage.intermediate
        kb_arn = f"arn:{Aws.PARTITION}:bedrock:{Aws.REGION}:{Aws.ACCOUNT_ID}:knowledge-base/{kb_id}"

        # The custom resources' function: reads the Knowledge Base and the data source, updates the latter.
        self.attach_log_group = month_of_logs(self, "AttachLogs")
        self.attach_role = iam.Role(
            self, "AttachRole", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")
        )
        self.attach_role.add_to_policy(logs_statement(self.attach_role, self.attach_log_group))
        self.attach_role.add_to_policy(
            iam.PolicyStatement(
                actions=["bedrock:GetKnowledgeBase", "bedrock:GetDataSource", "bedrock:UpdateDataSource"],
                resources=[kb_arn],
            )
        )
        # The inspection reads the data source's key policy (which key is known only then): this account's
        # keys in this region (a key policy cannot be read across accounts).
        keys = f"arn:{Aws.PARTITION}:kms:{Aws.REGION}:{Aws.ACCOUNT_ID}:key/*"
        nag.ack_resources(
            self.attach_role,
            "The inspection reads the data source's key policy (kms:GetKeyPolicy only); which key is known "
            "only when it reads the data source, so the grant is on this account's keys in this region.",
            [keys],
        )
        self.attach_role.add_to_policy(
            iam.PolicyStatement(
                actions=["kms:GetKeyPolicy"],
                resources=[keys],
            )
        )
        self._grant_delivery_source_lookup()
        self.attach_function = lambda_.Function(
            self,
            "AttachFunction",
            description=f"{self.stack_name}: attaches the transformation to data source {ds_id}, detaches it",
            runtime=lambda_.Runtime.PYTHON_3_13,
            architecture=lambda_.Architecture.ARM_64,
            handler=ATTACH_HANDLER,
            code=resources_code(),
            timeout=Duration.minutes(2),
            memory_size=256,
            role=self.attach_role,
            log_group=self.attach_log_group,
        )
        self.provider_log_group = month_of_logs(self, "ProviderLogs")
        self.provider = cr.Provider(
            self, "AttachProvider", on_event_handler=self.attach_function, log_group=self.provider_log_group
        )
        self.inspection = CustomResource(
            self,
            "Inspection",
            service_token=self.provider.service_token,
            resource_type="Custom::DataSourceInspection",
            properties={
                "KnowledgeBaseId": kb_id,
                "DataSourceId": ds_id,
                "RoleArn": config.knowledge_base_role_arn,
                # The chunk metadata the function adds, for an Aurora table's columns (none for the copy
                # when CONTEXT_METADATA_MAX_BYTES is 0)
                "ContextMetadataKey": config.context_metadata_key,
                "RdsMetadataColumns": "true" if config.rds_metadata_columns else "false",
                # What the stack does with the Knowledge Base's ingestion logs: the inspection refuses a
                # second delivery source for them before one is made (contextual_kb/cdk/ingestion_logs.py).
                "IngestionLogs": (
                    "off" if not config.ingestion_logs else "use" if config.ingestion_log_source else "create"
                ),
                "IngestionLogSource": (
                    config.ingestion_log_source or delivery_source_name(self.stack_name, kb_id)
                    if config.ingestion_logs
                    else ""
                ),
            },
        )

        self.transform = TransformFunction(
            self,
            "Transform",
            config=config,
            intermediate=self.intermediate,
            code=code,
            chunking={
                **config.function_chunking,
                # structure when the data source's chunking is NONE
                "CHUNKING": self.inspection.get_att_string("Chunking"),
            },
            vector_store=self.inspection.get_att_string("VectorStoreType"),
        )
        function = self.transform.function
        # The inspection says whether the key policy lets this role use the data source's key (its role
        # exists before the inspection runs; the role's policy, which needs the inspection, comes after).
        inspection = self.inspection.node.default_child
        assert isinstance(inspection, CfnResource)
        inspection.add_property_override("FunctionRoleArn", self.transform.role.role_arn)
        # The data source's KMS key (serverSideEncryptionConfiguration), which encrypts its ingestion's
        # transient data: the function reads and writes the intermediate files it may encrypt (inferred, not
        # documented: aws-facts.md). An ARN of no key when the data source has none (the inspection's answer).
        self.transform.role.add_to_policy(
            iam.PolicyStatement(
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                resources=[self.inspection.get_att_string("DataSourceKmsKeyArn")],
            )
        )

        # What the Knowledge Base's own role needs for a custom transformation, as the full stack grants it.
        self.kb_role = iam.Role.from_role_arn(
            self, "KnowledgeBaseRole", config.knowledge_base_role_arn, mutable=True
        )
        self.kb_policy = iam.Policy(self, "KnowledgeBaseAccess", roles=[self.kb_role])
        self.kb_policy.add_statements(
            *transformation_statements(
                function, self.intermediate, self.intermediate.encryption_key, holder=self.kb_policy
            )
        )
        self.kb_policy.node.add_dependency(self.inspection)  # a wrong role is said by the inspection first

        self.attachment = CustomResource(
            self,
            "Attachment",
            service_token=self.provider.service_token,
            resource_type="Custom::DataSourceAttachment",
            properties={
                "KnowledgeBaseId": kb_id,
                "DataSourceId": ds_id,
                "FunctionArn": function.function_arn,
                "IntermediateUri": f"s3://{self.intermediate.bucket_name}/",
                "ReplaceTransformation": "true" if config.replace_transformation else "false",
            },
        )
        self.attachment.node.add_dependency(self.kb_policy)
        self.attachment.node.add_dependency(self.transform)

        self.batch = BatchRole(self, "Batch", intermediate=self.intermediate, model_id=config.model_id)
        key = self.storage.key if self.storage else None
        self.alarm_topic = AlarmTopic(self, "Alarms", config=config, key=key)
        # The user's Knowledge Base's logs, delivered to a log group of this stack (what destroy removes).
        self.ingestion_logs = (
            IngestionLogs(
                self,
                "IngestionLogs",
                knowledge_base_arn=kb_arn,
                knowledge_base=kb_id,
                existing_source=config.ingestion_log_source,
            )
            if config.ingestion_logs
            else None
        )
        if self.ingestion_logs is not None:  # a Knowledge Base the inspection refuses is left untouched
            self.ingestion_logs.node.add_dependency(self.inspection)
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            function=function,
            timeout_seconds=config.function_timeout_seconds,
            topic=self.alarm_topic.topic,
            shares_quota=config.shares_quota,
            ingestion=self.ingestion_logs,
            namespace=self.transform.metrics_namespace,
            service=self.transform.service,
            model_id=config.model_id if config.calls_model else None,
            tokens_per_minute=config.model_tokens_per_minute,
        )
        # The data source is switched last: a failure of anything else rolls back before it is touched.
        self.attachment.node.add_dependency(self.batch)
        self.attachment.node.add_dependency(self.monitoring)
        if self.ingestion_logs is not None:
            self.attachment.node.add_dependency(self.ingestion_logs)
        for name, value in (
            ("KnowledgeBaseId", kb_id),
            ("DataSourceId", ds_id),
            ("SourceBucketName", self.inspection.get_att_string("SourceBucketName")),
            ("IntermediateBucketName", self.intermediate.bucket_name),
            ("TransformFunctionName", function.function_name),
            ("TransformFunctionArn", function.function_arn),
            ("VectorStoreType", self.inspection.get_att_string("VectorStoreType")),
            ("KnowledgeBaseRoleArn", config.knowledge_base_role_arn),
            ("KnowledgeBasePolicyName", self.kb_policy.policy_name),
            # One line: whether the data source's key policy lets the function's role use the key, or what
            # to add to it (printed by `cdk deploy`, checked by `ckb doctor`).
            ("DataSourceKeyCheck", self.inspection.get_att_string("DataSourceKeyCheck")),
            # One line: the Knowledge Base's ingestion logs: a new delivery source, its own used, or off.
            ("IngestionLogsCheck", self.inspection.get_att_string("IngestionLogsCheck")),
            ("StackMode", "attach"),
            ("BatchRoleArn", self.batch.role.role_arn),
            ("RdsMetadataColumns", self.inspection.get_att_string("MetadataColumns")),
            ("AlarmTopicArn", self.alarm_topic.topic.topic_arn),
            *([("IngestionLogGroupName", self.ingestion_logs.log_group_name)] if self.ingestion_logs else []),
        ):
            CfnOutput(self, name, value=value)
        acknowledge(self)

    def _grant_delivery_source_lookup(self) -> None:
        """The inspection looks for a delivery source the Knowledge Base already has for its ingestion logs
        (one a resource and log type): a list action, on no resource (AWS's vended-logs permissions: "*")."""
        self.attach_role.add_to_policy(
            iam.PolicyStatement(actions=["logs:DescribeDeliverySources"], resources=["*"])
        )
        nag.ack_resources(
            self.attach_role,
            "logs:DescribeDeliverySources (the inspection's look for the Knowledge Base's own delivery "
            "source) supports no resource-level permission: AWS requires *.",
            ["*"],
        )


def acknowledge(stack: AttachStack) -> None:
    """cdk-nag acknowledgments of what only the attach stack has (its custom resource's function and
    provider); the function, batch role, topic and the KB's policy acknowledge their own."""
    nag.ack(
        stack.attach_function,
        "L1",
        "Python 3.13, like the transformation function: the attach resource is tested on it.",
    )
    nag.ack(
        stack.provider,
        "IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
        "CDK's custom-resource Provider framework gives its function this managed policy (logs only).",
    )
    nag.ack_resources(
        stack.provider,
        "The Provider framework may invoke any version of the attach function (CDK's own grant).",
        [f"{stack.attach_function.function_arn}:*"],
    )
