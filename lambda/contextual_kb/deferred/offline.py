"""``ckb contextualize --local``: the whole deferred flow with no AWS account, on a labelled corpus.

moto's S3 in this process; the real handler ingests every document with ``CONTEXT_DEFER=always`` (no model
call: structural contexts now, every document pending); ``ckb contextualize`` plans, submits to the batch
inference stand-in (the real boto3 ``bedrock`` client, through ``AWS_ENDPOINT_URL_BEDROCK``), collects and
stores; then the handler runs again as the re-ingestion, with ``CONTEXT_DEFER=fallbacks`` and the runtime
stand-in counting every model call it would make (none, when every context is remembered).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from contextual_kb.deferred import sequence
from contextual_kb.deferred.contextualize import Contextualizer, Options, Summary
from contextual_kb.deferred.records import Limits
from contextual_kb.deferred.reingest import Reingested
from contextual_kb.local.batch_standin import BatchConfig, BatchStandIn
from contextual_kb.local.environment import environment

INTERMEDIATE = "ckb-local-intermediate"
SOURCE = "ckb-local-source"
LOCAL_ROLE = "arn:aws:iam::123456789012:role/ckb-local-batch"
REGION = "us-east-1"


@dataclass
class LocalRun:
    summary: Summary
    ingest_seconds: float  # the first ingestion, CONTEXT_DEFER=always
    reingest_seconds: float = 0.0
    first_ingestion: dict[str, Any] = field(default_factory=dict)  # the handler's summary line
    reingestion: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.summary.as_dict(),
            "ingest_seconds_deferred": round(self.ingest_seconds, 3),
            "reingest_seconds": round(self.reingest_seconds, 3),
        }


class LocalWorld:
    """Local S3 with the corpus staged as a Knowledge Base would, the runtime and batch stand-ins: each step
    of the deferred flow on demand (tests drive it step by step; ``run_local`` end to end)."""

    def __init__(self, documents: list[dict[str, Any]], batch: BatchConfig | None = None) -> None:
        self.documents = documents
        self.batch = batch or BatchConfig()
        self._stack = ExitStack()

    def __enter__(self) -> LocalWorld:
        import boto3
        from moto import mock_aws

        from contextual_kb.local.bedrock_standin import StandInConfig, running_standin
        from contextual_kb.local.kb_staging import build_event, stage_file

        fake = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_DEFAULT_REGION": REGION}
        for name, value in fake.items():
            os.environ.setdefault(name, value)
        self._stack.enter_context(mock_aws())
        self.model = self._stack.enter_context(
            running_standin(StandInConfig(latency_ms=0.0, per_token_ms=0.0))
        )
        self.s3 = boto3.client("s3", region_name=REGION)
        for bucket in (INTERMEDIATE, SOURCE):
            self.s3.create_bucket(Bucket=bucket)
        staged = []
        for doc in self.documents:
            name = str(doc.get("doc_id", doc["original_uuid"]))
            self.s3.put_object(Bucket=SOURCE, Key=name, Body=doc["content"].encode("utf-8"))
            chunks = [c["content"] for c in doc["chunks"]]
            staged.append(
                stage_file(self.s3, INTERMEDIATE, f"s3://{SOURCE}/{name}", chunks, chunks_per_batch=8)
            )
        self.event = build_event(INTERMEDIATE, staged)
        self.standin = BatchStandIn(self.s3, self.batch).start()
        self._stack.callback(self.standin.stop)
        self.claude = {"CONTEXT_STRATEGY": "claude", "ANTHROPIC_BEDROCK_BASE_URL": self.model.url}
        self._stack.enter_context(environment(AWS_ENDPOINT_URL_BEDROCK=self.standin.url, **self.claude))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def ingest(self, defer: str = "always") -> Any:
        """The handler over the staged event (the Knowledge Base's sync)."""
        from contextual_kb.local import runner

        with environment(CONTEXT_DEFER=defer):
            return runner.invoke(self.event)

    def contextualizer(
        self, log: Callable[[str], None] = lambda _: None, *, s3: Any = None, **options: Any
    ) -> Contextualizer:
        """``ckb contextualize`` over the local world (``s3``: its own client, e.g. one with a latency)."""
        import boto3

        from contextual_kb.deferred import services
        from contextual_kb.runtime.context.claude.client import ClaudeClient

        options.setdefault("limits", Limits(min_records=self.batch.min_records))
        options.setdefault("poll_seconds", 0.02)
        client = ClaudeClient(region=REGION, timeout_seconds=30, max_retries=1, max_connections=8)
        s3 = s3 or self.s3
        return Contextualizer(
            s3,
            boto3.client("bedrock", region_name=REGION),
            Options(bucket=INTERMEDIATE, role_arn=LOCAL_ROLE, **options),
            source_state=services.source_state(s3),
            on_demand=services.on_demand(client),
            log=log,
        )

    def reingest(self) -> tuple[int, Any]:
        """The re-ingestion: the handler again, CONTEXT_DEFER=fallbacks; the model calls it made."""
        before = self.model.stats.answered
        result = self.ingest("fallbacks")
        return self.model.stats.answered - before, result


def run_local(
    documents: list[dict[str, Any]],
    *,
    group_size: int = 40,
    limits: Limits | None = None,
    batch: BatchConfig | None = None,
    on_demand_retry: bool = False,
    dry_run: bool = False,
    log: Callable[[str], None] = lambda _: None,
    progress: Callable[[str, int, int], None] = lambda *_: None,
    shard_documents: int = 0,
) -> LocalRun:
    """The corpus (``[{doc_id, original_uuid, content, chunks: [{content}]}]``) through the deferred flow."""
    with LocalWorld(documents, batch) as world:
        first = world.ingest("always")
        log(
            f"ingested {len(documents)} document(s) with CONTEXT_DEFER=always in {first.seconds:.2f} s: "
            "no model call"
        )
        contextualizer = world.contextualizer(
            log,
            group_size=group_size,
            limits=limits or Limits(min_records=world.batch.min_records),
            on_demand_retry=on_demand_retry,
            dry_run=dry_run,
            shard_documents=shard_documents,
        )
        contextualizer.progress = progress
        again: dict[str, Any] = {}

        def reingest(sources: list[str]) -> Reingested:  # marks: nothing to do offline
            return Reingested(marked=sources)

        def start_ingestion() -> tuple[str, int | None]:  # the handler again, once every shard is marked
            calls, again["result"] = world.reingest()
            return "local", calls

        contextualizer.start_ingestion = start_ingestion
        summary = sequence.run(contextualizer, reingest)
    run = LocalRun(summary, first.seconds, first_ingestion=first.summary())
    if "result" in again:
        run.reingest_seconds = again["result"].seconds
        run.reingestion = again["result"].summary()
    return run
