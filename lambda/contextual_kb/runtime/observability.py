"""Powertools Logger, Metrics and Tracer, shared by the handler and the logic.

Service name and metrics namespace come from ``POWERTOOLS_SERVICE_NAME`` and
``POWERTOOLS_METRICS_NAMESPACE`` when set. Document text is never logged at INFO.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "contextual-kb")
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "ContextualKB")

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = Tracer(service=SERVICE)

_EVENT_KEYS = {
    "knowledgeBaseId": "knowledge_base_id",
    "dataSourceId": "data_source_id",
    "ingestionJobId": "ingestion_job_id",
}


def bind_event_keys(raw_event: Any) -> None:
    """Put the KB, data source and ingestion job ids on every log line, even for an event that fails to
    parse (read leniently from the raw event)."""
    if not isinstance(raw_event, Mapping):
        return
    keys = {
        ours: raw_event[theirs]
        for theirs, ours in _EVENT_KEYS.items()
        if isinstance(raw_event.get(theirs), str)
    }
    if keys:
        logger.append_keys(**keys)
