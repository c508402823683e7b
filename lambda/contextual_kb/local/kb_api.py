"""The local Knowledge Base's API surface: the REST routes of ``bedrock-agent`` and ``bedrock-agent-runtime``
(and the two ``bedrock`` and ``service-quotas`` calls ``ckb doctor`` makes) as boto3 sends them, each to
its operation's name; SigV4 required (its region read, its signature not checked); and what the control
plane answers about the Knowledge Bases and data sources it serves."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar
from urllib.parse import unquote

from contextual_kb.local import service_model
from contextual_kb.local.http_base import JsonHandler, parse_json
from contextual_kb.local.kb_model import ACCOUNT, ApiError, Catalog, now, page

# (operation, path parameters, JSON body, the request's signing region) -> the answer's JSON body
Dispatch = Callable[[str, dict[str, str], dict[str, Any], str], dict[str, Any]]


def get_knowledge_base(catalog: Catalog, kb_id: str) -> dict[str, Any]:
    kb = catalog.kb(kb_id)
    storage: dict[str, Any] = {"type": kb.storage}
    if kb.storage == "OPENSEARCH_SERVERLESS":
        storage["opensearchServerlessConfiguration"] = {
            "collectionArn": f"arn:aws:aoss:{kb.region}:{ACCOUNT}:collection/local",
            "vectorIndexName": "contextual-kb-local",
            "fieldMapping": {
                "vectorField": "bedrock-knowledge-base-default-vector",
                "textField": "AMAZON_BEDROCK_TEXT_CHUNK",
                "metadataField": "AMAZON_BEDROCK_METADATA",
            },
        }
    return {
        "knowledgeBase": {
            "knowledgeBaseId": kb.knowledge_base_id,
            "name": kb.name,
            "description": kb.description,
            "knowledgeBaseArn": kb.arn,
            "roleArn": f"arn:aws:iam::{ACCOUNT}:role/local-knowledge-base",
            "knowledgeBaseConfiguration": {
                "type": "VECTOR",
                "vectorKnowledgeBaseConfiguration": {
                    "embeddingModelArn": f"arn:aws:bedrock:{kb.region}::foundation-model/{kb.embedding_model}"
                },
            },
            "storageConfiguration": storage,
            "status": "ACTIVE",
            "createdAt": now(),
            "updatedAt": now(),
        }
    }


def list_knowledge_bases(catalog: Catalog, body: dict[str, Any]) -> dict[str, Any]:
    summaries = [
        {
            "knowledgeBaseId": kb.knowledge_base_id,
            "name": kb.name,
            "description": kb.description,
            "status": "ACTIVE",
            "updatedAt": now(),
        }
        for kb in catalog.specs.values()
    ]
    return page(summaries, body, "knowledgeBaseSummaries", limit=1000)


def get_data_source(catalog: Catalog, kb_id: str, ds_id: str, *, transforms: bool) -> dict[str, Any]:
    ds = catalog.ds(kb_id, ds_id)
    chunking: dict[str, Any] = {"chunkingStrategy": ds.chunking}
    if ds.chunking == "FIXED_SIZE":
        chunking["fixedSizeChunkingConfiguration"] = {
            "maxTokens": ds.max_tokens,
            "overlapPercentage": ds.overlap_percentage,
        }
    ingestion: dict[str, Any] = {"chunkingConfiguration": chunking}
    if transforms:
        ingestion["customTransformationConfiguration"] = {
            "intermediateStorage": {"s3Location": {"uri": f"s3://{ds.intermediate_bucket}"}},
            "transformations": [
                {
                    "stepToApply": "POST_CHUNKING",
                    "transformationFunction": {
                        "transformationLambdaConfiguration": {"lambdaArn": ds.transformation_arn}
                    },
                }
            ],
        }
    s3: dict[str, Any] = {"bucketArn": f"arn:aws:s3:::{ds.bucket}"}
    if ds.inclusion_prefixes:
        s3["inclusionPrefixes"] = list(ds.inclusion_prefixes)
    return {
        "dataSource": {
            "knowledgeBaseId": kb_id,
            "dataSourceId": ds_id,
            "name": ds.name,
            "status": "AVAILABLE",
            "dataSourceConfiguration": {"type": "S3", "s3Configuration": s3},
            "vectorIngestionConfiguration": ingestion,
            "dataDeletionPolicy": "DELETE",
            "createdAt": now(),
            "updatedAt": now(),
        }
    }


def list_data_sources(catalog: Catalog, kb_id: str, body: dict[str, Any]) -> dict[str, Any]:
    summaries = [
        {
            "knowledgeBaseId": kb_id,
            "dataSourceId": ds.data_source_id,
            "name": ds.name,
            "status": "AVAILABLE",
            "updatedAt": now(),
        }
        for ds in catalog.kb(kb_id).data_sources
    ]
    return page(summaries, body, "dataSourceSummaries", limit=1000)


def list_tags(catalog: Catalog, arn: str) -> dict[str, Any]:
    for kb in catalog.specs.values():
        if kb.arn == arn:
            return {"tags": dict(kb.tags)}
    raise ApiError(404, "ResourceNotFoundException", f"no resource {arn}")


def foundation_model_availability(model_id: str) -> dict[str, Any]:
    return {
        "modelId": model_id,
        "agreementAvailability": {"status": "AVAILABLE"},
        "authorizationStatus": "AUTHORIZED",
        "entitlementAvailability": "AVAILABLE",
        "regionAvailability": "AVAILABLE",
    }


_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    (method, re.compile(f"^{pattern}$"), operation)
    for method, pattern, operation in (
        ("GET", r"/knowledgebases/(?P<kb>[^/]+)", "GetKnowledgeBase"),
        ("POST", r"/knowledgebases/?", "ListKnowledgeBases"),
        ("GET", r"/knowledgebases/(?P<kb>[^/]+)/datasources/(?P<ds>[^/]+)", "GetDataSource"),
        ("POST", r"/knowledgebases/(?P<kb>[^/]+)/datasources/?", "ListDataSources"),
        (
            "PUT",
            r"/knowledgebases/(?P<kb>[^/]+)/datasources/(?P<ds>[^/]+)/ingestionjobs/?",
            "StartIngestionJob",
        ),
        (
            "GET",
            r"/knowledgebases/(?P<kb>[^/]+)/datasources/(?P<ds>[^/]+)/ingestionjobs/(?P<job>[^/]+)",
            "GetIngestionJob",
        ),
        (
            "POST",
            r"/knowledgebases/(?P<kb>[^/]+)/datasources/(?P<ds>[^/]+)/ingestionjobs/?",
            "ListIngestionJobs",
        ),
        ("POST", r"/knowledgebases/(?P<kb>[^/]+)/datasources/(?P<ds>[^/]+)/documents", "ListDocuments"),
        ("GET", r"/tags/(?P<arn>.+)", "ListTagsForResource"),
        ("POST", r"/knowledgebases/(?P<kb>[^/]+)/retrieve", "Retrieve"),
        ("POST", r"/rerank", "Rerank"),
        ("GET", r"/foundation-model-availability/(?P<model>[^/]+)", "GetFoundationModelAvailability"),
    )
]
# Each operation's model in botocore (service, operation), whose bounds the request's body is held to.
MODELS = {
    "ListKnowledgeBases": ("bedrock-agent", "ListKnowledgeBases"),
    "ListDataSources": ("bedrock-agent", "ListDataSources"),
    "StartIngestionJob": ("bedrock-agent", "StartIngestionJob"),
    "ListIngestionJobs": ("bedrock-agent", "ListIngestionJobs"),
    "ListDocuments": ("bedrock-agent", "ListKnowledgeBaseDocuments"),
    "Retrieve": ("bedrock-agent-runtime", "Retrieve"),
    "Rerank": ("bedrock-agent-runtime", "Rerank"),
}
_REGION = re.compile(r"Credential=[^/]+/\d{8}/(?P<region>[^/]+)/")


class Handler(JsonHandler):
    """Subclassed per server with its ``dispatch``."""

    server_name = "knowledge-base"
    dispatch: ClassVar[Dispatch]

    def answer(self, method: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        return 200, self._answer(method, raw)

    def _answer(self, method: str, raw: bytes) -> dict[str, Any]:
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("AWS4-HMAC-SHA256 "):
            raise ApiError(403, "AccessDeniedException", "missing authentication")
        if self.headers.get("X-Amz-Target", "").startswith("ServiceQuotasV20190624."):
            return self._service_quotas(self.headers["X-Amz-Target"].split(".", 1)[1])
        path = self.path.split("?", 1)[0]
        routed = next(
            (
                (operation, m)
                for verb, pattern, operation in _ROUTES
                if verb == method and (m := pattern.match(path))
            ),
            None,
        )
        if routed is None:
            raise ApiError(404, "UnknownOperationException", f"no operation at {method} {path}")
        operation, match = routed
        body = parse_json(raw) if raw else {}
        if not isinstance(body, dict):
            raise ApiError(400, "ValidationException", "the body is not a JSON object")
        if operation in MODELS:
            refused = service_model.problems(*MODELS[operation], body)
            if refused:
                raise ApiError(400, "ValidationException", service_model.message(refused))
        found = {name: unquote(value) for name, value in match.groupdict().items()}
        region_match = _REGION.search(auth)
        region = region_match.group("region") if region_match else ""
        return self.dispatch(operation, found, body, region)

    def _service_quotas(self, action: str) -> dict[str, Any]:
        if action != "ListServiceQuotas":
            raise ApiError(400, "UnknownOperationException", f"service-quotas {action} is not emulated")
        # No quota is known locally: the doctor says so (a warning), never a figure made up here.
        return {"Quotas": []}
