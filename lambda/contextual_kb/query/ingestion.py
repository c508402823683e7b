"""Ingestion jobs: start one (or join the one already running), follow it, report what failed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import boto3
from botocore.exceptions import ClientError

from contextual_kb.query.retrieval import CLIENT_CONFIG

RUNNING = ("STARTING", "IN_PROGRESS", "STOPPING")
ENDED = ("COMPLETE", "FAILED", "STOPPED")


class IngestionError(Exception):
    """An ingestion API call failed; the message names it."""


@dataclass(frozen=True, slots=True)
class Job:
    job_id: str
    status: str
    statistics: dict[str, int]
    failure_reasons: tuple[str, ...]
    joined: bool = False  # already running when asked: followed, not started again
    started_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def ended(self) -> bool:
        return self.status in ENDED


@dataclass(frozen=True, slots=True)
class FailedDocument:
    uri: str
    reason: str


class Ingestion:
    def __init__(self, knowledge_base_id: str, data_source_id: str, region: str, client: Any = None) -> None:
        self.kb = knowledge_base_id
        self.ds = data_source_id
        self.client = client or boto3.client("bedrock-agent", region_name=region, config=CLIENT_CONFIG)

    def start(self) -> Job:
        """A new job, or the one already running (never two at once)."""
        running = self.running()
        if running is not None:
            return running
        started = self._call(
            "StartIngestionJob",
            self.client.start_ingestion_job,
            knowledgeBaseId=self.kb,
            dataSourceId=self.ds,
        )
        return _job(started["ingestionJob"])

    def running(self) -> Job | None:
        """The job running on this data source, if one is."""
        running = self._call(
            "ListIngestionJobs",
            self.client.list_ingestion_jobs,
            knowledgeBaseId=self.kb,
            dataSourceId=self.ds,
            filters=[{"attribute": "STATUS", "operator": "EQ", "values": list(RUNNING)}],
            maxResults=10,
        ).get("ingestionJobSummaries", [])
        return self.get(running[0]["ingestionJobId"], joined=True) if running else None

    def data_source(self) -> dict[str, Any]:
        return self._call(
            "GetDataSource", self.client.get_data_source, knowledgeBaseId=self.kb, dataSourceId=self.ds
        )["dataSource"]

    def get(self, job_id: str, *, joined: bool = False) -> Job:
        got = self._call(
            "GetIngestionJob",
            self.client.get_ingestion_job,
            knowledgeBaseId=self.kb,
            dataSourceId=self.ds,
            ingestionJobId=job_id,
        )
        return _job(got["ingestionJob"], joined=joined)

    def follow(
        self, job: Job, *, interval: float = 5.0, sleep: Callable[[float], None] = time.sleep
    ) -> Iterator[Job]:
        """The job's states until it ends (the last one yielded has ended)."""
        yield job
        while not job.ended:
            sleep(interval)
            job = self.get(job.job_id, joined=job.joined)
            yield job

    def failed_documents(self) -> list[FailedDocument]:
        out: list[FailedDocument] = []
        request: dict[str, Any] = {"knowledgeBaseId": self.kb, "dataSourceId": self.ds, "maxResults": 100}
        while True:
            page = self._call(
                "ListKnowledgeBaseDocuments", self.client.list_knowledge_base_documents, **request
            )
            for detail in page.get("documentDetails", []):
                if detail.get("status") == "FAILED":
                    out.append(
                        FailedDocument(_uri(detail.get("identifier") or {}), detail.get("statusReason", ""))
                    )
            if not page.get("nextToken"):
                return out
            request["nextToken"] = page["nextToken"]

    def _call(self, api: str, method: Any, **request: Any) -> dict[str, Any]:
        try:
            return method(**request)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise IngestionError(
                f"{api} failed: {error.get('Code', 'Unknown')}: {error.get('Message', '')}"
            ) from None


def _job(raw: dict[str, Any], *, joined: bool = False) -> Job:
    return Job(
        job_id=raw["ingestionJobId"],
        status=raw.get("status", "UNKNOWN"),
        statistics={k: int(v) for k, v in (raw.get("statistics") or {}).items()},
        failure_reasons=tuple(raw.get("failureReasons") or ()),
        joined=joined,
        started_at=raw.get("startedAt"),
        updated_at=raw.get("updatedAt"),
    )


def _uri(identifier: dict[str, Any]) -> str:
    s3 = identifier.get("s3") or {}
    if isinstance(s3, dict) and s3.get("uri"):
        return str(s3["uri"])
    custom = identifier.get("custom") or {}
    return str(custom.get("id") or identifier.get("dataSourceType") or "?")
