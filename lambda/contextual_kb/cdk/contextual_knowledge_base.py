"""The whole of the repository's stack as one construct: a source bucket, the transformation
(``ContextualTransformation``: function, intermediate bucket, alarm topic, alarms, dashboard, the shared
quota's table), a vector store with our index analysis (OpenSearch Serverless or S3 Vectors), the Knowledge
Base and its S3 data source running the transformation, the deferred batch role, the Knowledge Base's
ingestion logs, and (``autoContextualize``) the deferred loop on Step Functions.

Made with the id ``"Default"`` (as ``stacks/stack.py`` does), its parts keep the logical IDs a stack of them
alone has: CDK leaves ``Default`` out of logical IDs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from contextual_kb.cdk.batch import BatchRole
from contextual_kb.cdk.bundling import resources_code
from contextual_kb.cdk.config import ConfigError, StackConfig
from contextual_kb.cdk.deferred_workflow import DeferredWorkflow
from contextual_kb.cdk.ingestion_logs import IngestionLogs
from contextual_kb.cdk.knowledge_base import KnowledgeBase, knowledge_base_role
from contextual_kb.cdk.storage import Storage
from contextual_kb.cdk.transformation import ContextualTransformation, settings_of
from contextual_kb.cdk.vector_store import OpenSearchVectorStore, S3VectorStore


class ContextualKnowledgeBase(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: StackConfig | Mapping[str, Any] | None = None,
        code: lambda_.Code | None = None,
        handler_file: str | Path | None = None,
    ) -> None:
        """``settings``: the context keys of docs/SETTINGS.md (or a ``StackConfig``); ``handler_file``: your
        own handler module (docs/SDK.md) instead of ours."""
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        if any(isinstance(c, ContextualKnowledgeBase) and c is not self for c in stack.node.find_all()):
            # Its collection, policies, Knowledge Base and data source are named from the stack's name (kept
            # as they are: a new name replaces the resource in a stack deployed before).
            raise ConfigError(
                f"a second ContextualKnowledgeBase in stack {stack.node.id}: their resources' names come "
                "from the stack's name and would collide at deploy; put each in a stack of its own"
            )
        self.config = config = settings_of(settings)
        if config.attach:
            raise ConfigError(
                "knowledgeBaseId: a ContextualKnowledgeBase makes its own (attach: docs/ATTACH.md)"
            )
        self.storage = Storage(
            self, "Storage", kms_key=config.kms_key, expiration_days=config.intermediate_expiration_days
        )
        key = self.storage.key  # the buckets' grants cover the key too
        # "Default": the function, topic and monitoring keep the logical IDs the stack always gave them.
        self.transformation = ContextualTransformation(
            self,
            "Default",
            settings=config,
            intermediate_bucket=self.storage.intermediate,
            code=code,
            monitoring=False,
            handler_file=handler_file,
        )
        self.transform = self.transformation.transform
        role = knowledge_base_role(self)
        store: OpenSearchVectorStore | S3VectorStore
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
            storage=store.storage, source=self.storage.source, transformation=self.transformation, key=key
        )
        if isinstance(store, OpenSearchVectorStore):  # created only once its index answers
            self.knowledge_base.knowledge_base.node.add_dependency(store.index)
        self.batch = BatchRole(
            self, "Batch", intermediate=self.storage.intermediate, model_id=config.model_id
        )
        kb = self.knowledge_base.knowledge_base
        self.ingestion_logs = (
            IngestionLogs(
                self,
                "IngestionLogs",
                knowledge_base_arn=kb.attr_knowledge_base_arn,
                knowledge_base=str(kb.name),
            )
            if config.ingestion_logs
            else None
        )
        self.monitoring = self.transformation.add_monitoring(self.ingestion_logs)
        assert self.transformation.alarm_topic is not None
        self.alarm_topic = self.transformation.alarm_topic
        # The deferred loop in the cloud (autoContextualize: docs/DEFERRED.md), when asked for.
        self.deferred = (
            DeferredWorkflow(
                self,
                "Deferred",
                schedule=config.auto_contextualize,
                intermediate=self.storage.intermediate,
                source=self.storage.source,
                batch_role=self.batch.role,
                model_id=config.model_id,
                knowledge_base_id=kb.attr_knowledge_base_id,
                data_source_id=self.knowledge_base.data_source.attr_data_source_id,
                topic=self.alarm_topic.topic,
                map_concurrency=config.workflow_map_concurrency,
                reserved_concurrency=config.workflow_reserved_concurrency,
            )
            if config.auto_contextualize
            else None
        )
        if self.deferred is not None:
            self.deferred.acknowledge(self.storage.intermediate, self.storage.source)
