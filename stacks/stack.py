"""The stack: the public ``ContextualKnowledgeBase`` construct (contextual_kb.cdk) and the stack's outputs."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from contextual_kb.cdk import ContextualKnowledgeBase, StackConfig


class ContextualKbStack(Stack):
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
        self.config = config
        # "Default": CDK leaves it out of logical IDs, so every resource keeps the ID it had when the stack
        # built them itself (no replacement on the update to this construct).
        self.contextual = parts = ContextualKnowledgeBase(self, "Default", settings=config, code=code)
        self.storage, self.transform, self.vector_store = parts.storage, parts.transform, parts.vector_store
        self.knowledge_base, self.batch, self.alarm_topic = (
            parts.knowledge_base,
            parts.batch,
            parts.alarm_topic,
        )
        self.ingestion_logs, self.monitoring = parts.ingestion_logs, parts.monitoring
        self.deferred = parts.deferred
        kb = self.knowledge_base
        for name, value in (
            ("KnowledgeBaseId", kb.knowledge_base.attr_knowledge_base_id),
            ("DataSourceId", kb.data_source.attr_data_source_id),
            ("SourceBucketName", self.storage.source.bucket_name),
            ("IntermediateBucketName", self.storage.intermediate.bucket_name),
            ("TransformFunctionName", self.transform.function.function_name),
            ("TransformFunctionArn", self.transform.function.function_arn),
            ("VectorStoreType", config.vector_store),
            ("BatchRoleArn", self.batch.role.role_arn),
            ("AlarmTopicArn", self.alarm_topic.topic.topic_arn),
            *([("IngestionLogGroupName", self.ingestion_logs.log_group_name)] if self.ingestion_logs else []),
            *(
                [("ContextualizeStateMachineArn", self.deferred.state_machine.state_machine_arn)]
                if self.deferred
                else []
            ),
        ):
            CfnOutput(self, name, value=value)
