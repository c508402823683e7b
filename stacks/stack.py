"""The stack: storage, the transformation function, a vector store, the Knowledge Base, monitoring."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from stacks.alarm_topic import AlarmTopic
from stacks.batch import BatchRole
from stacks.bundling import resources_code
from stacks.config import StackConfig
from stacks.deferred_workflow import DeferredWorkflow
from stacks.function import TransformFunction
from stacks.ingestion_logs import IngestionLogs
from stacks.knowledge_base import KnowledgeBase, knowledge_base_role
from stacks.monitoring import Monitoring
from stacks.storage import Storage
from stacks.vector_store import OpenSearchVectorStore, S3VectorStore


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
        self.storage = Storage(
            self, "Storage", kms_key=config.kms_key, expiration_days=config.intermediate_expiration_days
        )
        key = self.storage.key  # the buckets' grants cover the key too
        self.transform = TransformFunction(
            self, "Transform", config=config, intermediate=self.storage.intermediate, code=code
        )
        role = knowledge_base_role(self)
        if config.vector_store == "opensearch":
            store = OpenSearchVectorStore(
                self,
                "VectorStore",
                dimension=config.embedding_dimension,
                kb_role=role,
                key=key,
                resources_code=resources_code(),
                standby_replicas=config.opensearch_standby_replicas,
            )
        else:
            store = S3VectorStore(self, "VectorStore", dimension=config.embedding_dimension, key=key)
        self.vector_store = store
        self.knowledge_base = KnowledgeBase(self, "KnowledgeBase", config=config, role=role)
        self.knowledge_base.build(
            storage=store.storage,
            source=self.storage.source,
            intermediate=self.storage.intermediate,
            function=self.transform.function,
            key=key,
        )
        if isinstance(store, OpenSearchVectorStore):  # created only once its index answers
            self.knowledge_base.knowledge_base.node.add_dependency(store.index)
        self.batch = BatchRole(
            self, "Batch", intermediate=self.storage.intermediate, model_id=config.model_id
        )
        kb = self.knowledge_base
        self.alarm_topic = AlarmTopic(self, "Alarms", config=config, key=key)
        self.ingestion_logs = (
            IngestionLogs(
                self,
                "IngestionLogs",
                knowledge_base_arn=kb.knowledge_base.attr_knowledge_base_arn,
                knowledge_base=str(kb.knowledge_base.name),
            )
            if config.ingestion_logs
            else None
        )
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            function=self.transform.function,
            timeout_seconds=config.function_timeout_seconds,
            topic=self.alarm_topic.topic,
            shares_quota=config.shares_quota,
            ingestion=self.ingestion_logs,
        )
        self.deferred = (
            DeferredWorkflow(
                self,
                "Deferred",
                schedule=config.auto_contextualize,
                intermediate=self.storage.intermediate,
                source=self.storage.source,
                batch_role=self.batch.role,
                model_id=config.model_id,
                knowledge_base_id=kb.knowledge_base.attr_knowledge_base_id,
                data_source_id=kb.data_source.attr_data_source_id,
                topic=self.alarm_topic.topic,
            )
            if config.auto_contextualize
            else None
        )
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
