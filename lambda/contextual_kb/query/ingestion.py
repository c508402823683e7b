"""Ingestion jobs: start one (or join the one already running), follow it, report what failed.

AWS runs one ingestion job at a time per data source and per Knowledge Base, and 5 per account (General
Reference, Amazon Bedrock quotas: "Concurrent ingestion jobs", not adjustable; aws-facts.md). ``start`` waits
for the one in the way, saying what it waits for, and past ``wait_seconds`` stops in one line saying what to
run. Which error StartIngestionJob answers for which limit is not documented: ConflictException and
ServiceQuotaExceededException are both taken as "a job is in the way", and the running jobs are looked up.
"""

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
# StartIngestionJob's answers when a job runs on the data source or the Knowledge Base, or the account's five
# run: which for which is not documented (the API reference lists both).
BUSY = frozenset({"ConflictException", "ServiceQuotaExceededException"})
WAIT_SECONDS = 3600.0  # how long to wait for another job by default: ingestion jobs run minutes to hours
WAIT_INTERVAL = 15.0
# When our job is still refused after the wait: a plain sync ingests whatever is marked or changed by then.
WHAT_TO_RUN = "run ckb sync again once it is free (it ingests what is marked or changed by then)"


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

    def start(
        self,
        *,
        fresh: bool = False,
        wait_seconds: float = WAIT_SECONDS,
        interval: float = WAIT_INTERVAL,
        sleep: Callable[[float], None] | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> Job:
        """A new job, or (``fresh`` false) the one already running on this data source: never two at once.

        ``fresh``: the caller changed documents (marked them) and a job already running may have scanned
        before the change, so it is waited for and a new job started after it. A job of another data source
        of the Knowledge Base, or the account's five, are waited for in any case. Each new reason to wait is
        told to ``notify`` once; after ``wait_seconds`` (counted in the intervals slept) IngestionError says
        what is in the way and what to run."""
        waited = 0.0
        told: set[str] = set()
        while True:
            running = self.running()
            if running is not None:
                if not fresh:
                    return running
                blocker = (
                    f"ingestion job {running.job_id} on data source {self.ds} is {running.status} (it may "
                    "have scanned before the documents were marked: ours starts after it)"
                )
            else:
                try:
                    started = self.client.start_ingestion_job(knowledgeBaseId=self.kb, dataSourceId=self.ds)
                    return _job(started["ingestionJob"])
                except ClientError as exc:
                    error = exc.response.get("Error", {})
                    code = str(error.get("Code", "Unknown"))
                    if code not in BUSY:
                        raise IngestionError(
                            f"StartIngestionJob failed: {code}: {error.get('Message', '')}"
                        ) from None
                    raced = self.running()  # one started on this data source since we looked?
                    if raced is not None and not fresh:
                        return raced
                    blocker = (
                        self._blocker(code)
                        if raced is None
                        else f"ingestion job {raced.job_id} on data source {self.ds} is {raced.status} "
                        "(started while we started ours: ours starts after it)"
                    )
            if waited >= wait_seconds:
                raise IngestionError(f"{blocker}; waited {waited:,.0f} s: {WHAT_TO_RUN}")
            if notify is not None and blocker not in told:
                told.add(blocker)
                notify(f"waiting for another ingestion job: {blocker}")
            (sleep or time.sleep)(interval)
            waited += interval

    def _blocker(self, code: str) -> str:
        """What keeps StartIngestionJob from starting ours (it answered ``code``): a job of another data
        source of this Knowledge Base, or, when none runs here, the account's five."""
        try:
            for data_source in self._other_data_sources():
                jobs = self.client.list_ingestion_jobs(
                    knowledgeBaseId=self.kb,
                    dataSourceId=data_source,
                    filters=[{"attribute": "STATUS", "operator": "EQ", "values": list(RUNNING)}],
                    maxResults=1,
                ).get("ingestionJobSummaries", [])
                if jobs:
                    return (
                        f"ingestion job {jobs[0]['ingestionJobId']} on data source {data_source} of "
                        f"knowledge base {self.kb} is {jobs[0].get('status', 'running')} (one job at a time "
                        "per Knowledge Base)"
                    )
        except ClientError as exc:
            listed = exc.response.get("Error", {}).get("Code", "an error")
            return (
                f"StartIngestionJob answered {code} and the Knowledge Base's jobs could not be listed "
                f"({listed}): a job of another of its data sources, or the account's 5 concurrent ingestion "
                "jobs, are in the way"
            )
        return (
            f"StartIngestionJob answered {code} and no job runs on knowledge base {self.kb}: the account's 5 "
            "concurrent ingestion jobs (not adjustable) are in use by other Knowledge Bases"
        )

    def _other_data_sources(self) -> Iterator[str]:
        request: dict[str, Any] = {"knowledgeBaseId": self.kb, "maxResults": 100}
        while True:
            page = self.client.list_data_sources(**request)
            for summary in page.get("dataSourceSummaries", []):
                if summary.get("dataSourceId") != self.ds:
                    yield str(summary["dataSourceId"])
            if not page.get("nextToken"):
                return
            request["nextToken"] = page["nextToken"]

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

    def knowledge_base(self) -> dict[str, Any]:
        return self._call("GetKnowledgeBase", self.client.get_knowledge_base, knowledgeBaseId=self.kb)[
            "knowledgeBase"
        ]

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
