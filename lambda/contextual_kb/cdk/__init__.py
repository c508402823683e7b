"""Contextual retrieval for your own CDK app (``pip install "contextual-kb[cdk]"``; docs/CONSTRUCTS.md).

- ``ContextualTransformation``: the POST_CHUNKING transformation function, its role, an intermediate bucket
  (or yours), alarms and dashboard; joins your ``CfnDataSource`` as a property value, a Mixin or a grant.
- ``ContextualKnowledgeBase``: the whole stack's parts (vector store, Knowledge Base, data source, batch
  role).
- ``IngestionLogs``: a Knowledge Base's ingestion logs delivered to a log group, for
  ``ContextualTransformation.add_monitoring`` (its failed documents on the alarms and dashboard).
- ``StackConfig``, ``load``, ``ConfigError``: the settings (the ``-c`` context keys of docs/SETTINGS.md).
"""

from contextual_kb.cdk.config import ConfigError, StackConfig, load, setting_names
from contextual_kb.cdk.contextual_knowledge_base import ContextualKnowledgeBase
from contextual_kb.cdk.ingestion_logs import IngestionLogs
from contextual_kb.cdk.transformation import ContextualTransformation, TransformationMixin

__all__ = [
    "ConfigError",
    "ContextualKnowledgeBase",
    "ContextualTransformation",
    "IngestionLogs",
    "StackConfig",
    "TransformationMixin",
    "load",
    "setting_names",
]
