"""The deferred workflow deployed (``-c autoContextualize=both -c contextDefer=always``) on ministack, with
the real CDK CLI: the transformation, deployed, ingests a document with every context deferred; the deployed
state machine's looks plan, submit to the batch inference stand-in (the step's ``bedrock`` endpoint), store
and re-ingest (the document marked in the source bucket, an ingestion job started on ministack's Knowledge
Base); the deployed transformation then finds every context remembered and defers nothing.

Bedrock's job events cannot be sent on ministack (PutEvents with an ``aws.*`` source is refused, as on
AWS): the looks are started as the job-end rule and the schedule start them (``{"mode": "resume"}``), which
is also the "event never delivered" case: the schedule's looks finish the run. The deployed rule is asked
(TestEventPattern) whether the end of each job the run submitted would start such a look.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from contextual_kb.local.batch_standin import BatchConfig, BatchStandIn
from tests.lifecycle.ministack import Ministack, adapt_assembly, cdk
from tests.lifecycle.test_stack_lifecycle import EVENT, STACK, _deploy, _stack_resources, _synth, engine

pytestmark = pytest.mark.lifecycle
__all__ = ["engine"]  # the module's fixture: ministack and the stand-ins

CONTEXT = ["-c", "vectorStore=s3vectors", "-c", "autoContextualize=both", "-c", "contextDefer=always"]
DOCUMENT = "docs/payments-runbook.md"
COPIES = 3


def _ingest(ministack: Ministack, outputs: dict[str, str], copies: int = 1) -> dict[str, Any]:
    """The sample event on the deployed transformation, its document in the stack's source bucket; with
    ``copies``, as many documents, each with a first line of its own (another text: its own pending record,
    so the run has as many shards as documents when a shard holds one)."""
    s3 = ministack.client("s3")
    intermediate, source = outputs["IntermediateBucketName"], outputs["SourceBucketName"]
    event = json.loads((EVENT / "event.json").read_text())
    event["bucketName"] = intermediate
    template = event["inputFiles"][0]
    event["inputFiles"] = []
    for n, document in enumerate(_documents(copies)):
        for path in (EVENT / "objects").rglob("*"):
            if path.is_file():
                key = path.relative_to(EVENT / "objects").as_posix()
                batch = json.loads(path.read_bytes())
                if n:
                    key = key.replace(".md_", f"-{n}.md_")
                    batch["fileContents"][0]["contentBody"] = (
                        f"Copy {n}.\n" + batch["fileContents"][0]["contentBody"]
                    )
                s3.put_object(Bucket=intermediate, Key=key, Body=json.dumps(batch).encode())
        s3.put_object(Bucket=source, Key=document, Body=b"# Payments runbook\n")
        entry = json.loads(json.dumps(template))
        entry["originalFileLocation"]["s3_location"]["uri"] = f"s3://{source}/{document}"
        if n:
            entry["contentBatches"] = [
                {"key": b["key"].replace(".md_", f"-{n}.md_")} for b in entry["contentBatches"]
            ]
        event["inputFiles"].append(entry)
    reply = ministack.client("lambda").invoke(
        FunctionName=outputs["TransformFunctionName"], Payload=json.dumps(event).encode()
    )
    payload = json.loads(reply["Payload"].read())
    assert reply["StatusCode"] == 200 and "FunctionError" not in reply, payload
    return dict(payload)


def _documents(copies: int) -> list[str]:
    return [DOCUMENT] + [DOCUMENT.replace(".md", f"-{n}.md") for n in range(1, copies)]


def _pending(ministack: Ministack, bucket: str) -> list[str]:
    listed = ministack.client("s3").list_objects_v2(Bucket=bucket, Prefix="contextual-kb/pending/")
    return [o["Key"] for o in listed.get("Contents", [])]


def _look(ministack: Ministack, machine: str, mode: str) -> dict[str, Any]:
    """One execution, as a schedule or the job-end rule starts it; its output."""
    states = ministack.client("stepfunctions")
    arn = states.start_execution(stateMachineArn=machine, input=json.dumps({"mode": mode}))["executionArn"]
    for _ in range(600):
        described = states.describe_execution(executionArn=arn)
        if described["status"] != "RUNNING":
            assert described["status"] == "SUCCEEDED", described
            return {**json.loads(described["output"]), "arn": arn}
        time.sleep(0.2)
    raise AssertionError(f"execution {arn} still running")


def _check_shards(
    ministack: Ministack, outputs: dict[str, str], first: dict[str, Any], looks: list[Any]
) -> None:
    """Planned and stored in shards: the first execution's plan Map and a later one's store Map each ran
    one child execution a document, every one succeeded; every document marked for re-ingestion."""
    states = ministack.client("stepfunctions")
    summary = looks[-1]["summary"]
    # Planned and stored in shards, each a child execution of a Distributed Map (two Maps, three each).
    assert summary["shards"] == COPIES
    runs = [r for look in looks for r in states.list_map_runs(executionArn=look["arn"])["mapRuns"]]
    # The plan's Map in the first execution, the store's in the one that found every job ended.
    assert len(runs) == 2 and runs[0]["executionArn"] == first["arn"]
    for run in runs:
        described = states.describe_map_run(mapRunArn=run["mapRunArn"])
        assert described["status"] == "SUCCEEDED" and described["itemCounts"]["succeeded"] == COPIES
    for document in _documents(COPIES):
        marked = ministack.client("s3").get_object(
            Bucket=outputs["SourceBucketName"], Key=f"{document}.metadata.json"
        )
        assert "ckb_reprocessed" in marked["Body"].read().decode()


def _check_job_end_rule(ministack: Ministack, jobs: list[str]) -> None:
    """The deployed job-end rule, asked through EventBridge's TestEventPattern (ministack's): the end of each
    job the run submitted (an event shaped as the sample on "How EventBridge for Amazon Bedrock works")
    starts a resume look; the same job still under way, or another's job, starts nothing."""
    events = ministack.client("events")
    (rule,) = [physical for kind, physical in _stack_resources(ministack.client("cloudformation")).values()
               if kind == "AWS::Events::Rule"]  # fmt: skip
    name = rule.rsplit("/", 1)[-1].split("|")[-1]
    pattern = events.describe_rule(Name=name)["EventPattern"]
    (target,) = events.list_targets_by_rule(Rule=name)["Targets"]
    assert json.loads(target["Input"]) == {"mode": "resume"}

    def matches(job: str, status: str) -> bool:
        arn = "arn:aws:bedrock:us-east-1:000000000000:model-invocation-job/abcdefghwxyz"
        event = {
            "version": "0", "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
            "detail-type": "Batch Inference Job State Change", "source": "aws.bedrock",
            "account": "000000000000", "time": "2026-12-06T12:34:56Z", "region": "us-east-1",
            "resources": [arn],
            "detail": {"version": "0.0", "accountId": "000000000000", "batchJobName": job, "batchJobArn": arn,
                       "batchModelId": "anthropic.claude-haiku-4-5-20251001-v1:0", "status": status,
                       "failureMessage": ""},
        }  # fmt: skip
        return bool(events.test_event_pattern(EventPattern=pattern, Event=json.dumps(event))["Result"])

    assert jobs
    for job in jobs:
        assert all(
            matches(job, status) for status in ("Completed", "PartiallyCompleted", "Failed", "Expired")
        )
        assert not matches(job, "InProgress") and not matches(job, "Submitted")
    assert not matches("someone-elses-job", "Completed")


def _knowledge_base(agent: Any) -> tuple[str, str]:
    """A Knowledge Base and data source on ministack's API (its CloudFormation does not provision one): the
    re-ingestion's ingestion job starts there."""
    kb = agent.create_knowledge_base(
        name="kb",
        roleArn="arn:aws:iam::000000000000:role/kb",
        knowledgeBaseConfiguration={"type": "VECTOR", "vectorKnowledgeBaseConfiguration": {
            "embeddingModelArn": "arn:aws:bedrock:us-east-1::foundation-model/amazon.titan-embed-text-v2:0"}},
        storageConfiguration={"type": "S3_VECTORS", "s3VectorsConfiguration": {
            "indexArn": "arn:aws:s3vectors:us-east-1:000000000000:bucket/b/index/i"}},
    )["knowledgeBase"]  # fmt: skip
    source = agent.create_data_source(
        knowledgeBaseId=kb["knowledgeBaseId"],
        name="docs",
        dataSourceConfiguration={"type": "S3", "s3Configuration": {"bucketArn": "arn:aws:s3:::docs"}},
    )["dataSource"]
    return str(kb["knowledgeBaseId"]), str(source["dataSourceId"])


def _destroy(ministack: Ministack, work: Path, machine: str) -> None:
    """Destroy: the workflow's log groups, state machine and schedules go with the stack."""
    deployed = _stack_resources(ministack.client("cloudformation"))
    ran = cdk(
        ["destroy", STACK, "--app", str(work / "deferred-ministack"), "--force"],
        ministack.environment(),
        work,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    groups = {g["logGroupName"] for g in ministack.client("logs").describe_log_groups()["logGroups"]}
    ours = [physical for logical, (kind, physical) in deployed.items()
            if kind == "AWS::Logs::LogGroup" and logical.startswith("Deferred")]  # fmt: skip
    assert len(ours) == 2 and not set(ours) & groups
    machines = ministack.client("stepfunctions").list_state_machines()["stateMachines"]
    assert machine not in {m["stateMachineArn"] for m in machines}


def test_the_deployed_workflow_contextualizes_what_ingestion_deferred(engine: dict[str, Any]) -> None:
    ministack: Ministack = engine["ministack"]
    work: Path = engine["work"]
    ran = cdk(["bootstrap", "aws://000000000000/us-east-1"], ministack.environment(), work)
    assert ran.returncode == 0, ran.stderr[-3000:]
    agent = ministack.client("bedrock-agent")
    kb_id, ds_id = _knowledge_base(agent)
    standin = BatchStandIn(ministack.client("s3"), BatchConfig(min_records=1, step_seconds=0.5)).start()
    try:
        _synth(work / "deferred", CONTEXT)
        adapt_assembly(
            work / "deferred",
            work / "deferred-ministack",
            STACK,
            attributes={},
            function_environment={"ANTHROPIC_BEDROCK_BASE_URL": engine["bedrock"].url},
            step_environment={
                "AWS_ENDPOINT_URL_BEDROCK": standin.url,
                "CKB_BATCH_MIN_RECORDS": "1",
                # One document a shard: the run's three documents are three shards, in each Map.
                "CKB_SHARD_DOCUMENTS": "1",
                "KNOWLEDGE_BASE_ID": kb_id,
                "DATA_SOURCE_ID": ds_id,
            },
        )
        outputs = _deploy(engine, work / "deferred-ministack")
        kinds = {kind for kind, _ in _stack_resources(ministack.client("cloudformation")).values()}
        for kind in ("AWS::StepFunctions::StateMachine", "AWS::Scheduler::Schedule", "AWS::Events::Rule"):
            assert kind in kinds, kind
        machine, intermediate = outputs["ContextualizeStateMachineArn"], outputs["IntermediateBucketName"]
        schedules = ministack.client("scheduler").list_schedules()["Schedules"]
        assert len([s for s in schedules if s["Target"]["Arn"] == machine]) == 3

        # Ingestion with every context deferred: no model call, the document pending.
        answered = engine["bedrock"].stats.answered
        _ingest(ministack, outputs, COPIES)
        assert engine["bedrock"].stats.answered == answered
        assert len(_pending(ministack, intermediate)) == COPIES

        first = _look(ministack, machine, "start")
        assert first["outcome"] in {"waiting", "done"}, first
        looks = [first]
        while looks[-1]["outcome"] == "waiting":  # the job-end rule's (or the schedule's) looks
            time.sleep(0.5)
            looks.append(_look(ministack, machine, "resume"))
            assert len(looks) < 60
        summary = looks[-1]["summary"]
        assert looks[-1]["outcome"] == "done" and summary["run"] == first["run"]
        assert summary["contexts_stored"] == summary["pending_before"] > 0 and summary["pending_after"] == 0
        assert summary["reingested_documents"] == COPIES and _pending(ministack, intermediate) == []
        _check_shards(ministack, outputs, first, looks)

        def creates() -> int:
            return sum(1 for operation, _ in standin.requests if operation == "CreateModelInvocationJob")

        assert creates() == 1  # submitted once, whatever the looks
        _check_job_end_rule(
            ministack, [name for op, name in standin.requests if op == "CreateModelInvocationJob"]
        )
        jobs = agent.list_ingestion_jobs(knowledgeBaseId=kb_id, dataSourceId=ds_id)["ingestionJobSummaries"]
        assert len(jobs) == 1  # the re-ingestion's
        # Nothing left to plan (ministack's ingestion job stays running: the look plans nothing meanwhile).
        assert _look(ministack, machine, "start")["outcome"] in {"idle", "ingesting"}
        assert _look(ministack, machine, "resume")["outcome"] == "idle" and creates() == 1

        # The re-ingestion (ministack's ingestion never calls the transformation: invoked here): every
        # context remembered, nothing deferred, no model call.
        again = _ingest(ministack, outputs, COPIES)
        assert len(again["outputFiles"]) == COPIES and _pending(ministack, intermediate) == []
        assert engine["bedrock"].stats.answered == answered

        _destroy(ministack, work, machine)
    finally:
        standin.stop()
