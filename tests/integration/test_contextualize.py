"""Contexts made later, end to end offline: the handler records what it left without a model context, `ckb
contextualize` makes those contexts through the batch inference stand-in (the real boto3 client), stores
them where the handler reads them, and the re-ingestion calls no model. Faults: failed and missing records,
failed and expired jobs, duplicated and shuffled outputs, stale pending records, an interrupted run."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from typer.testing import CliRunner

from contextual_kb.deferred.offline import INTERMEDIATE, SOURCE, LocalWorld
from contextual_kb.local.batch_standin import BatchConfig
from contextual_kb.runtime.pending import PendingDocument
from tests.support import corpus

PENDING = "contextual-kb/pending/"


def pending(world: LocalWorld) -> dict[str, PendingDocument]:
    listed = world.s3.list_objects_v2(Bucket=INTERMEDIATE, Prefix=PENDING).get("Contents", [])
    return {
        o["Key"]: PendingDocument.parse(world.s3.get_object(Bucket=INTERMEDIATE, Key=o["Key"])["Body"].read())
        for o in listed
    }


def billed(world: LocalWorld) -> tuple[int, int]:
    """Input and output tokens of every output line the run's jobs and on-demand calls left in S3."""
    tokens = [0, 0]
    listed = world.s3.list_objects_v2(Bucket=INTERMEDIATE, Prefix="contextual-kb/batch/").get("Contents", [])
    for item in listed:
        if not item["Key"].endswith(".jsonl.out"):
            continue
        body = world.s3.get_object(Bucket=INTERMEDIATE, Key=item["Key"])["Body"].read()
        for line in body.splitlines():
            usage = (json.loads(line).get("modelOutput") or {}).get("usage") or {} if line.strip() else {}
            tokens[0] += usage.get("input_tokens", 0)
            tokens[1] += usage.get("output_tokens", 0)
    return tokens[0], tokens[1]


def test_everything_deferred_gets_model_contexts_and_the_reingestion_calls_no_model() -> None:
    with LocalWorld(corpus(), BatchConfig(min_records=1, duplicate_records=True, shuffle=True)) as world:
        first = world.ingest("always")
        model = first.summary()["model"]
        assert model["calls"] == 0 and model["deferred"] == 20 and model["documents_pending"] == 4
        assert world.model.stats.answered == 0
        records = pending(world)
        assert len(records) == 4 and all(r.pending == [0, 1, 2, 3, 4] for r in records.values())
        assert {r.reasons["deferred"] for r in records.values()} == {5}
        summary = world.contextualizer(group_size=2).run(reingest=lambda _sources: world.reingest()[0])
        assert (summary.pending_before, summary.records, summary.jobs) == (20, 12, 1)
        assert summary.contexts_stored == summary.model_contexts == 20
        assert summary.pending_after == 0 and pending(world) == {}
        assert summary.model_calls_during_reingest == 0 and summary.reingested_documents == 4
        assert summary.failed_records == 0  # every output line twice, in any order: matched by record id
        # Every line is charged, the repeated ones too (each carries usage AWS bills).
        assert (summary.input_tokens, summary.output_tokens) == billed(world) and summary.cost_usd > 0
        calls, again = world.reingest()
        assert calls == 0 and again.summary()["model"]["chunks_remembered"] == 20


def test_failed_and_missing_records_stay_pending_counted_or_are_retried_on_demand() -> None:
    faults = BatchConfig(min_records=1, failed_records={"R0000000001"}, missing_records={"R0000000002"})
    with LocalWorld(corpus(), faults) as world:
        world.ingest("always")
        summary = world.contextualizer(group_size=2).run()
        assert summary.failed_records == 2
        assert summary.contexts_stored + summary.pending_after == summary.pending_before == 20
        assert summary.pending_after == 4  # two records of two chunks each: still pending, nothing lost
        left = pending(world)
        assert len(left) == 1 and next(iter(left.values())).pending == [0, 1, 2, 3]
    with LocalWorld(corpus(), BatchConfig(min_records=1, failed_records={"R0000000001"})) as world:
        world.ingest("always")
        summary = world.contextualizer(group_size=2, on_demand_retry=True).run()
        assert summary.failed_records == 0 and summary.pending_after == 0  # asked again on demand: answered
        assert world.model.stats.answered == 1


@pytest.mark.parametrize(
    ("fault", "status"), [({"failed_jobs": 1}, "Failed"), ({"expired_jobs": 1}, "Expired")]
)
def test_a_job_that_fails_or_expires_leaves_its_chunks_pending_with_the_error_in_one_line(
    fault: dict[str, int], status: str
) -> None:
    lines: list[str] = []
    with LocalWorld(corpus(), BatchConfig(min_records=1, **fault)) as world:
        world.ingest("always")
        summary = world.contextualizer(log=lines.append, group_size=2).run()
        assert summary.jobs_failed == 1 and summary.contexts_stored == 0
        assert summary.pending_after == summary.pending_before == 20
        assert len(pending(world)) == 4
        (line,) = [entry for entry in lines if status in entry]
        assert "its chunks stay pending" in line and "\n" not in line
        # The next run picks them up again: a new job, and this time everything is stored.
        again = world.contextualizer(group_size=2).run()
        assert again.pending_after == 0 and again.contexts_stored == 20


def test_stale_pending_records_are_dropped_counted_never_stored_under_another_text() -> None:
    with LocalWorld(corpus(), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        records = pending(world)
        by_source = {r.source: key for key, r in records.items()}
        world.s3.delete_object(Bucket=SOURCE, Key="doc_0")  # deleted since it was ingested
        time.sleep(1.1)  # S3 keeps modification times to the second
        world.s3.put_object(Bucket=SOURCE, Key="doc_1", Body=b"rewritten")  # changed since
        # A record whose text no longer hashes to what was recorded.
        key = by_source[f"s3://{SOURCE}/doc_2"]
        broken = records[key].model_copy(update={"text": records[key].text + " tampered"})
        world.s3.put_object(Bucket=INTERMEDIATE, Key=key, Body=broken.dump())
        summary = world.contextualizer(group_size=2).run()
        assert summary.dropped == {"deleted": 1, "changed": 1, "corrupt": 1}
        assert summary.documents == 1 and summary.contexts_stored == 5
        stored = [
            o["Key"]
            for o in world.s3.list_objects_v2(Bucket=INTERMEDIATE, Prefix="contextual-kb/contexts/")[
                "Contents"
            ]
        ]
        assert stored == [records[by_source[f"s3://{SOURCE}/doc_3"]].memory_key]


def test_an_interrupted_run_resumes_without_submitting_again() -> None:
    class StoppedHereError(Exception):
        pass

    def stop(_seconds: float) -> None:
        raise StoppedHereError

    with LocalWorld(corpus(), BatchConfig(min_records=1, step_seconds=0.3)) as world:
        world.ingest("always")
        first = world.contextualizer(group_size=2)
        first.sleep = stop  # the first poll finds the job running: the command is stopped there
        with pytest.raises(StoppedHereError):
            first.run()
        summary = world.contextualizer(group_size=2).run()
        creates = [r for r in world.standin.requests if r[0] == "CreateModelInvocationJob"]
        assert len(creates) == 1 and summary.pending_after == 0 and summary.contexts_stored == 20


def test_too_few_records_for_a_job_run_on_demand_and_say_so() -> None:
    with LocalWorld(corpus(documents=1), BatchConfig(min_records=100)) as world:
        world.ingest("always")
        summary = world.contextualizer(group_size=2).run()
        assert summary.jobs == 0 and summary.on_demand_records == 3 and summary.pending_after == 0
        assert "below a job's minimum of 100: run on demand instead" in summary.notes[0]
        assert world.standin.requests == []


def test_a_dry_run_plans_and_prices_and_writes_nothing() -> None:
    with LocalWorld(corpus(), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        before = {o["Key"] for o in world.s3.list_objects_v2(Bucket=INTERMEDIATE)["Contents"]}
        summary = world.contextualizer(group_size=2, dry_run=True).run()
        after = {o["Key"] for o in world.s3.list_objects_v2(Bucket=INTERMEDIATE)["Contents"]}
        assert before == after and summary.estimated and summary.records == 12
        assert 0 < summary.cost_usd < summary.floor_usd


def test_what_falls_back_in_the_lambda_is_recorded_and_never_otherwise() -> None:
    with LocalWorld(corpus(documents=2)) as world:
        world.model.configure(fault_for=lambda seen: 400 if "guide 0" in seen.document else None)
        result = world.ingest("fallbacks")
        model = result.summary()["model"]
        assert model["fallbacks"] == {"model_rejected": 5} and model["documents_pending"] == 1
        (record,) = pending(world).values()
        assert record.source.endswith("doc_0") and record.reasons == {"model_rejected": 5}
        assert record.knowledge_base_id == "LOCALKB0001" and record.ingestion_job_id == "LOCALJOB001"
    with LocalWorld(corpus(documents=2)) as world:
        world.model.configure(fault_for=lambda seen: 400)
        assert world.ingest("never").summary()["model"]["documents_pending"] == 0
        assert pending(world) == {}


@pytest.mark.benchmark
def test_ckb_contextualize_local_prints_the_summary_and_json() -> None:
    from contextual_kb.cli.main import app

    result = CliRunner().invoke(app, ["contextualize", "--local", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    for key in ("documents", "chunks", "pending_before", "records", "jobs", "model_contexts", "pending_after",
                "model_calls_during_reingest", "cost_usd", "floor_usd", "cost_vs_floor"):  # fmt: skip
        assert key in summary, key
    assert summary["pending_after"] == 0 and summary["model_calls_during_reingest"] == 0
    assert summary["model_contexts"] == summary["chunks"] == 737
    # The table says whose contexts and what costs these are: the stand-in's, and money not spent.
    table = CliRunner().invoke(app, ["contextualize", "--local", "--dry-run"])
    assert table.exit_code == 0, table.output
    said = " ".join(table.output.split())
    assert "(local: S3 and batch inference stand-ins)" in said and "cost on Bedrock, had it run there" in said
    assert "the contexts are the batch stand-in's (made by rule, not by a model)" in said
    assert "nothing was spent" in said


def test_ckb_contextualize_against_a_deployed_stack_reads_its_outputs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not --local: the stack's outputs name the intermediate bucket and the batch role; no job running on
    the data source; S3 and the batch control plane reached as on AWS (here moto and the stand-in)."""
    import boto3
    from botocore.stub import ANY, Stubber

    from contextual_kb.cli.main import app
    from contextual_kb.query import aws_clients

    def outputs(**extra: str) -> dict[str, Any]:
        values = {
            "KnowledgeBaseId": "KBID123456",
            "DataSourceId": "DSID123456",
            "SourceBucketName": SOURCE,
            "IntermediateBucketName": INTERMEDIATE,
            **extra,
        }
        stack = {
            "StackName": "ContextualKb",
            "CreationTime": "2026-11-23T00:00:00Z",
            "StackStatus": "CREATE_COMPLETE",
            "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in values.items()],
        }
        return {"Stacks": [stack]}

    with LocalWorld(corpus(), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        cloudformation = boto3.client("cloudformation", region_name="us-east-1")
        agent = boto3.client("bedrock-agent", region_name="us-east-1")
        real = aws_clients.client
        stubbed = {"cloudformation": cloudformation, "bedrock-agent": agent, "s3": world.s3}

        def client(service: str, region: str | None = None, **config: Any) -> Any:
            return stubbed.get(service) or real(service, region, **config)

        monkeypatch.setattr(aws_clients, "client", client)
        with Stubber(cloudformation) as cfn, Stubber(agent) as jobs:
            cfn.add_response("describe_stacks", outputs())
            missing = CliRunner().invoke(app, ["contextualize", "--region", "us-east-1"])
            assert missing.exit_code == 1 and "has no BatchRoleArn output" in missing.stderr
            cfn.add_response(
                "describe_stacks", outputs(BatchRoleArn="arn:aws:iam::123456789012:role/ckb-batch")
            )
            listed = {
                "knowledgeBaseId": "KBID123456",
                "dataSourceId": "DSID123456",
                "filters": ANY,
                "maxResults": 10,
            }
            jobs.add_response("list_ingestion_jobs", {"ingestionJobSummaries": []}, listed)
            args = ["contextualize", "--region", "us-east-1", "--min-records", "1", "--poll-seconds", "0.02"]
            args += ["--group-size", "2", "--no-reingest", "--json"]
            # Paid work: the plan's estimate first; with no terminal to ask on and no --yes, nothing is sent.
            before = pending(world)
            refused = CliRunner().invoke(app, args)
            assert refused.exit_code == 1, refused.output
            said = " ".join(refused.stderr.split())
            assert (
                "paid: contexts for 20 pending chunk(s) of 4 document(s) by Bedrock batch inference" in said
            )
            assert "about $0.0" in said and said.endswith("Pass --yes to go on (the estimate is above)")
            assert pending(world).keys() == before.keys() and world.standin.jobs == {}
            cfn.add_response(
                "describe_stacks", outputs(BatchRoleArn="arn:aws:iam::123456789012:role/ckb-batch")
            )
            jobs.add_response("list_ingestion_jobs", {"ingestionJobSummaries": []}, listed)
            result = CliRunner().invoke(app, [*args, "--yes"])
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert summary["pending_after"] == 0 and summary["contexts_stored"] == 20 and summary["jobs"] == 1
        assert summary["model_calls_during_reingest"] is None  # --no-reingest
        assert pending(world) == {}


def test_a_run_stopped_after_storing_resumes_without_losing_the_reingestion_or_paying_twice() -> None:
    """Stopped right after a step's contexts are stored, before the state says so: the resume stores them
    again (idempotent), counts them once, re-ingests their documents, and sends no on-demand record twice."""
    from contextual_kb.deferred.contextualize import Contextualizer

    class StoppedHereError(Exception):
        pass

    with LocalWorld(corpus(), BatchConfig(min_records=100)) as world:  # too few for a job: on demand
        world.ingest("always")
        first = world.contextualizer(group_size=2)
        saved = first._save
        calls = {"n": 0}

        def save_then_stop(state: dict[str, Any]) -> None:
            if state.get("on_demand", {}).get("stored"):
                raise StoppedHereError  # the step is done; the state never records it
            calls["n"] += 1
            saved(state)

        first._save = save_then_stop  # type: ignore[method-assign]
        with pytest.raises(StoppedHereError):
            first.run()
        answered = world.model.stats.answered
        assert answered == 12 and pending(world)  # paid once; the pending records are still there
        sources: list[str] = []
        resumed: Contextualizer = world.contextualizer(group_size=2)
        summary = resumed.run(reingest=lambda found: sources.extend(found) or 0)
        assert world.model.stats.answered == answered  # read back from S3, not asked again
        assert summary.contexts_stored == 20 and summary.pending_after == 0 and pending(world) == {}
        assert len(sources) == 4 and summary.reingested_documents == 4


def test_chunks_remembered_meanwhile_leave_the_pending_record() -> None:
    from contextual_kb.runtime.context.claude.memory import ContextMemory, place_key

    with LocalWorld(corpus(documents=1), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        ((_key, record),) = pending(world).items()
        start, end = record.spans[0]
        ContextMemory(world.s3).save(
            INTERMEDIATE, record.memory_key, {place_key(record.text[start:end], start): "Known."}
        )
        summary = world.contextualizer(group_size=2).run()
        assert summary.pending_before == 4 and summary.pending_after == 0 and pending(world) == {}
        assert summary.model_contexts == 5


def test_a_line_separator_in_the_text_does_not_split_a_record() -> None:
    documents = corpus(documents=2)
    for doc in documents:
        doc["chunks"][0]["content"] = "Intro\u2028with a line separator.\n"
        doc["content"] = "".join(c["content"] for c in doc["chunks"])
    with LocalWorld(documents, BatchConfig(min_records=1)) as world:
        world.ingest("always")
        summary = world.contextualizer(group_size=2).run()
        assert summary.failed_records == 0 and summary.pending_after == 0 and summary.contexts_stored == 10


def test_on_demand_answers_are_kept_as_they_come_so_a_crash_midway_pays_only_for_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from contextual_kb.deferred import contextualize

    class CrashedError(Exception):
        pass

    monkeypatch.setattr(contextualize, "ON_DEMAND_SLICE", 5)
    with LocalWorld(corpus(), BatchConfig(min_records=100)) as world:  # too few for a job: 12 on demand
        world.ingest("always")
        first = world.contextualizer(group_size=2)
        assert first.on_demand is not None
        ask, slices = first.on_demand, {"n": 0}

        def crash_on_the_third_slice(records: list[Any]) -> Any:
            slices["n"] += 1
            if slices["n"] == 3:
                raise CrashedError
            return ask(records)

        first.on_demand = crash_on_the_third_slice
        with pytest.raises(CrashedError):
            first.run()
        assert world.model.stats.answered == 10  # two slices of five, kept in S3
        summary = world.contextualizer(group_size=2).run()
        assert world.model.stats.answered == 12  # the resume paid for the last two alone
        assert summary.contexts_stored == 20 and summary.pending_after == 0


def test_records_of_a_document_recorded_again_during_the_run_are_not_asked_again_on_demand() -> None:
    """A sync during the run records the documents again with other chunks: the batch's answers no longer
    fit, so they are counted as failed and not paid for again on demand; the new records stay pending."""
    faults = BatchConfig(min_records=1, failed_records={"R0000000001"}, step_seconds=0.2)
    with LocalWorld(corpus(), faults) as world:
        world.ingest("always")

        def resync(line: str) -> None:
            if not line.startswith("submitted"):
                return
            for key, record in pending(world).items():  # the last two chunks made one
                spans = [*record.spans[:-2], (record.spans[-2][0], record.spans[-1][1])]
                again = record.model_copy(update={"spans": spans, "pending": list(range(len(spans)))})
                world.s3.put_object(Bucket=INTERMEDIATE, Key=key, Body=again.dump())

        summary = world.contextualizer(log=resync, group_size=2, on_demand_retry=True).run()
        assert world.model.stats.answered == 0  # nothing asked on demand for answers that cannot be used
        assert summary.contexts_stored == 0 and summary.failed_records == summary.records
        # Discarded, but billed by AWS: every line with usage is charged as it is read.
        assert (summary.input_tokens, summary.output_tokens) == billed(world) and summary.cost_usd > 0
        assert summary.pending_after == 16 and all(len(r.pending) == 4 for r in pending(world).values())


def test_an_s3_error_reading_a_pending_record_stops_the_run_and_never_passes_for_a_deleted_one() -> None:
    """A throttled read of a pending record must not discard the batch's paid answers as if the document
    were gone: the run stops (one clear error), and the next run stores them."""
    from botocore.exceptions import ClientError

    with LocalWorld(corpus(), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        first = world.contextualizer(group_size=2)
        get, seen = first.s3.get_object, {"collecting": False}

        class Throttled:
            def __getattr__(self, name: str) -> Any:
                return getattr(world.s3, name)

            def get_object(self, **kwargs: Any) -> Any:
                if seen["collecting"] and kwargs["Key"].startswith(PENDING):
                    error = {"Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."}}
                    raise ClientError(error, "GetObject")
                return get(**kwargs)

        first.s3 = Throttled()
        first.log = lambda line: seen.update(collecting=seen["collecting"] or line.startswith("submitted"))
        with pytest.raises(ClientError):
            first.run()
        assert len(pending(world)) == 4
        summary = world.contextualizer(group_size=2).run()
        creates = [r for r in world.standin.requests if r[0] == "CreateModelInvocationJob"]
        assert len(creates) == 1 and summary.contexts_stored == 20 and summary.pending_after == 0


def test_a_record_written_again_while_being_settled_stands_as_the_function_wrote_it() -> None:
    """The function records a document again (a sync) between the settling's read and its delete: the
    conditional delete is refused and the new record stays, its chunks pending for the next run."""
    with LocalWorld(corpus(documents=2), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        contextualizer = world.contextualizer(group_size=2)
        settle, still_wanted = contextualizer._settle, contextualizer._still_wanted
        rewritten: list[str] = []
        one_at_a_time = threading.Lock()  # records are settled several at a time: one sync, not two

        def settling(state: dict[str, Any]) -> dict[str, int]:
            def sync_meanwhile(document: PendingDocument) -> list[int]:
                wanted = still_wanted(document)
                with one_at_a_time:
                    if not rewritten:
                        (key,) = [k for k, r in pending(world).items() if r.memory_key == document.memory_key]
                        again = document.model_copy(update={"pending": [0], "reasons": {"deadline": 1}})
                        world.s3.put_object(Bucket=INTERMEDIATE, Key=key, Body=again.dump())
                        rewritten.append(key)
                return wanted

            contextualizer._still_wanted = sync_meanwhile  # type: ignore[method-assign]
            return settle(state)

        contextualizer._settle = settling  # type: ignore[method-assign]
        summary = contextualizer.run()
        left = pending(world)
        assert list(left) == rewritten and left[rewritten[0]].pending == [0]
        assert summary.pending_after == 1 and summary.contexts_stored == 10


def test_a_record_that_failed_before_its_document_was_recorded_again_is_not_asked_again_either() -> None:
    """Three jobs; one's records fail, and the document is recorded again once that job is stored: no record
    of the document is asked again on demand, whichever job it was in."""
    from contextual_kb.deferred.records import Limits

    faults = BatchConfig(min_records=1, failed_records={"R0000000001"}, step_seconds=0.05)
    with LocalWorld(corpus(documents=1), faults) as world:
        world.ingest("always")
        contextualizer = world.contextualizer(
            group_size=1, on_demand_retry=True, limits=Limits(min_records=1, max_job_records=2)
        )
        store, stored = contextualizer._store, []

        def then_resync(state: dict[str, Any], ids: list[str], *args: Any) -> list[str]:
            failed = store(state, ids, *args)
            stored.append(ids)
            if "R0000000001" in ids:  # a sync records the document again once the failed job is stored
                for key, record in pending(world).items():
                    spans = [*record.spans[:-2], (record.spans[-2][0], record.spans[-1][1])]
                    again = record.model_copy(update={"spans": spans, "pending": list(range(len(spans)))})
                    world.s3.put_object(Bucket=INTERMEDIATE, Key=key, Body=again.dump())
            return failed

        contextualizer._store = then_resync  # type: ignore[method-assign]
        summary = contextualizer.run()
        assert summary.jobs == 3 and world.model.stats.answered == 0  # not one on-demand call
        # The new record keeps pending what no stored context fits: at least its new (merged) last chunk.
        (record,) = pending(world).values()
        assert (
            summary.failed_records >= 1
            and 3 in record.pending
            and summary.pending_after == len(record.pending)
        )


def test_the_plan_holds_no_document_text_however_many_documents_are_pending() -> None:
    """Planning reads the pending records several at a time and spools the records to disk: its memory is
    about the same for 32 documents as for 128, both more than the 16 read at a time (it held every text and
    every record's line before)."""
    import tracemalloc

    peaks = []
    for documents in (32, 128):
        with LocalWorld(corpus(documents, chunks=8, lines=60), BatchConfig(min_records=1)) as world:
            world.ingest("always")
            planner = world.contextualizer(dry_run=True)
            tracemalloc.start()
            summary = planner.run()
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
            assert summary.documents == documents and summary.pending_before == documents * 8
    assert peaks[1] < 1.6 * peaks[0], peaks  # measured 1.05-1.28; the code before: 3.15


def test_ckb_contextualize_sends_several_s3_requests_at_a_time() -> None:
    """Each pending document is read and written more than once in a run: those requests overlap (a run over
    many documents is bound by S3's latency, not by the CPU)."""
    import boto3

    from contextual_kb.deferred.offline import REGION

    in_flight, most = [0], [0]
    lock = threading.Lock()

    def wait_for_the_network(**_: Any) -> None:
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        time.sleep(0.005)
        with lock:
            in_flight[0] -= 1

    with LocalWorld(corpus(documents=24), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        s3 = boto3.client("s3", region_name=REGION)
        s3.meta.events.register("request-created.s3", wait_for_the_network)
        summary = world.contextualizer(s3=s3).run()
    assert summary.contexts_stored == 24 * 5 and summary.pending_after == 0
    assert most[0] >= 4, most


def test_a_record_deleted_between_the_two_planning_passes_is_left_out_not_counted_as_corrupt() -> None:
    """Another run settles a record after the first pass chose it: the plan leaves it out and drops nothing;
    one rewritten unreadable meanwhile is counted as corrupt."""
    with LocalWorld(corpus(), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        planner = world.contextualizer(dry_run=True)
        usable = planner._usable

        def meanwhile(leave_out: set[str]) -> tuple[list[list[str]], Any]:
            groups, dropped = usable(leave_out)
            world.s3.delete_object(Bucket=INTERMEDIATE, Key=groups[0][0])
            world.s3.put_object(Bucket=INTERMEDIATE, Key=groups[1][0], Body=b"{not json")
            return groups, dropped

        planner._usable = meanwhile  # type: ignore[method-assign]
        summary = planner.run()
    assert summary.documents == 2 and summary.dropped == {"corrupt": 1}


def creates(world: LocalWorld) -> int:
    return len([r for r in world.standin.requests if r[0] == "CreateModelInvocationJob"])


def test_a_second_run_while_the_first_waits_at_its_confirmation_refuses_in_one_line() -> None:
    """Two runs at once (a prompt left waiting is enough) would plan, and pay for, the same pending chunks:
    the first claims the run before planning, the second is refused, and the first goes on alone."""
    from contextual_kb.deferred.contextualize import ContextualizeError

    with LocalWorld(corpus(), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        refused: list[str] = []

        def meanwhile(_quote: Any) -> None:
            with pytest.raises(ContextualizeError) as second:
                world.contextualizer(group_size=2).run()
            refused.append(str(second.value))
            quote = world.contextualizer(group_size=2, dry_run=True).run()  # a dry run says so
            assert any("another ckb contextualize is planning a run" in note for note in quote.notes)

        first = world.contextualizer(group_size=2)
        first.confirm = meanwhile
        summary = first.run()
        assert creates(world) == 1 and summary.contexts_stored == 20 and pending(world) == {}
        (line,) = refused
        assert "is under way in another ckb contextualize" in line and "\n" not in line
        # Finished: the claim is gone, and the next run finds nothing pending.
        assert world.contextualizer(group_size=2).run().notes == ["nothing pending: no job submitted"]


def test_a_claim_that_lapsed_at_a_prompt_is_taken_over_and_the_first_run_pays_for_nothing() -> None:
    from contextual_kb.deferred.contextualize import ContextualizeError

    with LocalWorld(corpus(), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        taken: list[Any] = []

        def lapse_meanwhile(_quote: Any) -> None:
            second = world.contextualizer(group_size=2)
            second.claim.lease_seconds = 0  # the first's claim has lapsed: taken over
            taken.append(second.run())

        first = world.contextualizer(group_size=2)
        first.confirm = lapse_meanwhile
        with pytest.raises(ContextualizeError, match="was taken over by another ckb contextualize"):
            first.run()
        (summary,) = taken
        assert creates(world) == 1 and summary.contexts_stored == 20 and pending(world) == {}


def test_a_run_whose_process_died_is_resumed_once_its_claim_lapses() -> None:
    class KilledError(BaseException):
        pass

    def killed(_seconds: float) -> None:
        raise KilledError

    with LocalWorld(corpus(), BatchConfig(min_records=1, step_seconds=0.3)) as world:
        world.ingest("always")
        first = world.contextualizer(group_size=2)
        first.sleep = killed
        first.claim.release = lambda **_: None  # type: ignore[method-assign]  # no chance to release
        with pytest.raises(KilledError):
            first.run()
        from contextual_kb.deferred.contextualize import ContextualizeError

        with pytest.raises(ContextualizeError, match="under way in another"):
            world.contextualizer(group_size=2).run()
        second = world.contextualizer(group_size=2)
        second.claim.lease_seconds = 0
        summary = second.run()
        assert creates(world) == 1 and summary.contexts_stored == 20 and pending(world) == {}


@pytest.mark.parametrize("key", ["current.json", "state.json"])
def test_a_throttled_read_of_the_run_state_stops_and_never_starts_a_second_run(key: str) -> None:
    from botocore.exceptions import ClientError

    class StoppedHereError(Exception):
        pass

    def stop(_seconds: float) -> None:
        raise StoppedHereError

    with LocalWorld(corpus(), BatchConfig(min_records=1, step_seconds=0.3)) as world:
        world.ingest("always")
        first = world.contextualizer(group_size=2)
        first.sleep = stop
        with pytest.raises(StoppedHereError):
            first.run()
        second = world.contextualizer(group_size=2)
        get = world.s3.get_object

        class Throttled:
            def __getattr__(self, name: str) -> Any:
                return getattr(world.s3, name)

            def get_object(self, **kwargs: Any) -> Any:
                if kwargs["Key"].endswith(key):
                    error = {"Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."}}
                    raise ClientError(error, "GetObject")
                return get(**kwargs)

        second.s3 = Throttled()
        with pytest.raises(ClientError, match="SlowDown"):
            second.run()
        assert creates(world) == 1
        summary = world.contextualizer(group_size=2).run()
        assert creates(world) == 1 and summary.contexts_stored == 20


def test_a_corrupt_run_state_stops_in_one_line_saying_what_to_do() -> None:
    from contextual_kb.cli.errors import explain
    from contextual_kb.deferred.contextualize import ContextualizeError

    class StoppedHereError(Exception):
        pass

    def stop(_seconds: float) -> None:
        raise StoppedHereError

    with LocalWorld(corpus(), BatchConfig(min_records=1, step_seconds=0.3)) as world:
        world.ingest("always")
        first = world.contextualizer(group_size=2)
        first.sleep = stop
        with pytest.raises(StoppedHereError):
            first.run()
        (state_key,) = [
            o["Key"]
            for o in world.s3.list_objects_v2(Bucket=INTERMEDIATE, Prefix="contextual-kb/batch/")["Contents"]
            if o["Key"].endswith("/state.json")
        ]
        world.s3.put_object(Bucket=INTERMEDIATE, Key=state_key, Body=b'{"run": "cut sh')
        with pytest.raises(ContextualizeError) as stopped:
            world.contextualizer(group_size=2).run()
        line = str(stopped.value)
        assert state_key in line and "cannot be read" in line and "\n" not in line
        assert "delete s3://ckb-local-intermediate/contextual-kb/batch/current.json" in line
        explained = explain(stopped.value)
        assert explained is not None and explained.line() == line


def test_a_dry_run_with_a_run_unfinished_does_not_quote_its_records_again() -> None:
    class StoppedHereError(Exception):
        pass

    def stop(_seconds: float) -> None:
        raise StoppedHereError

    with LocalWorld(corpus(), BatchConfig(min_records=1, step_seconds=0.3)) as world:
        world.ingest("always")
        first = world.contextualizer(group_size=2)
        first.sleep = stop
        with pytest.raises(StoppedHereError):
            first.run()
        quote = world.contextualizer(group_size=2, dry_run=True).run()
        assert quote.documents == 0 and quote.pending_before == 0 and quote.cost_usd == 0
        assert any("is unfinished" in note and "4 document(s)" in note for note in quote.notes)
        summary = world.contextualizer(group_size=2).run()
        assert creates(world) == 1 and summary.contexts_stored == 20


def test_a_model_without_batch_prices_is_quoted_and_charged_at_its_on_demand_prices_never_zero() -> None:
    """Claude Sonnet 4.6 has no batch price in the table: quoted and charged at its on-demand prices (an
    upper bound, named in the summary), never $0; --batch-prices gives the real ones."""
    from contextual_kb.local.environment import environment
    from contextual_kb.runtime.context.claude.pricing import prices_for

    sonnet = "global.anthropic.claude-sonnet-4-6"
    with LocalWorld(corpus(), BatchConfig(min_records=1)) as world:
        with environment(MODEL_ID=sonnet):
            world.ingest("always")
        quote = world.contextualizer(group_size=2, dry_run=True).run()
        on_demand = prices_for(sonnet)
        assert quote.priced_on_demand == [sonnet] and quote.cost_usd == pytest.approx(
            (quote.input_tokens * on_demand.input + quote.output_tokens * on_demand.output) / 1e6
        )
        given = world.contextualizer(
            group_size=2, dry_run=True, batch_prices='{"input": 1.5, "output": 7.5}'
        ).run()
        assert given.priced_on_demand == [] and given.cost_usd == pytest.approx(quote.cost_usd / 2)
        summary = world.contextualizer(group_size=2).run()
        assert summary.contexts_stored == 20 and summary.priced_on_demand == [sonnet]
        assert summary.cost_usd == pytest.approx(
            (summary.input_tokens * on_demand.input + summary.output_tokens * on_demand.output) / 1e6
        )


def with_copies() -> list[dict[str, Any]]:
    """The corpus and two copies of its first document (a copied README, a LICENSE: the same text)."""
    documents = corpus()
    for name in ("copy_a", "copy_b"):
        documents.append({**documents[0], "doc_id": name, "original_uuid": name})
    return documents


def test_every_source_of_one_text_gets_the_contexts_asked_once_and_is_ingested_again() -> None:
    """Three sources with one text: one record each, their chunks asked once, all three re-ingested and
    every record settled (one record naming one source left the others with structural contexts)."""
    with LocalWorld(with_copies(), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        records = pending(world)
        assert len(records) == 6 and len({r.memory_key for r in records.values()}) == 4
        sources: list[str] = []
        summary = world.contextualizer(group_size=2).run(reingest=lambda found: sources.extend(found) or 0)
        assert summary.records == 12 and summary.contexts_stored == 20  # the copies' chunks asked once
        assert summary.documents == 6 and summary.same_text == 2 and summary.pending_before == 30
        assert sorted(sources) == sorted(f"s3://{SOURCE}/{d}" for d in ("doc_0", "doc_1", "doc_2", "doc_3",
                                                                         "copy_a", "copy_b"))  # fmt: skip
        assert summary.model_contexts == 30 and summary.pending_after == 0 and pending(world) == {}
        calls, again = world.reingest()
        assert calls == 0 and again.summary()["model"]["chunks_remembered"] == 30


def test_deleting_one_copy_drops_its_record_alone_and_the_others_keep_theirs() -> None:
    with LocalWorld(with_copies(), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        world.s3.delete_object(Bucket=SOURCE, Key="doc_0")
        sources: list[str] = []
        summary = world.contextualizer(group_size=2).run(reingest=lambda found: sources.extend(found) or 0)
        assert summary.dropped == {"deleted": 1} and summary.same_text == 1
        assert f"s3://{SOURCE}/copy_a" in sources and f"s3://{SOURCE}/copy_b" in sources
        assert f"s3://{SOURCE}/doc_0" not in sources and summary.pending_after == 0


def marking(world: LocalWorld, s3: Any = None, jobs: list[str] | None = None) -> Any:
    """``ckb contextualize``'s re-ingestion on the local world: sources marked in S3 (``s3``: the operator's
    client), then the ingestion job (here the handler again), counted in ``jobs``."""
    from contextual_kb.deferred.reingest import reingest_s3

    def start_job() -> tuple[str, int | None]:
        calls, _ = world.reingest()
        (jobs if jobs is not None else []).append("job")
        return "LOCALJOB COMPLETE", calls

    return lambda sources: reingest_s3(s3 or world.s3, sources, start_job, lambda _line: None)


def sidecars(world: LocalWorld) -> list[str]:
    listed = world.s3.list_objects_v2(Bucket=SOURCE).get("Contents", [])
    return sorted(o["Key"] for o in listed if o["Key"].endswith(".metadata.json"))


def test_documents_that_cannot_be_marked_stay_pending_awaiting_reingestion_and_are_said() -> None:
    """A source outside S3 cannot be marked (a sync skips it as it is): its record is kept, awaiting
    re-ingestion, counted apart with why; the next run marks it again (here: still not in S3)."""
    with LocalWorld(corpus(), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        key, record = next((k, r) for k, r in pending(world).items() if r.source.endswith("doc_0"))
        wiki = "https://wiki.example.com/pages/guide-0"
        world.s3.put_object(
            Bucket=INTERMEDIATE, Key=key, Body=record.model_copy(update={"source": wiki}).dump()
        )
        jobs: list[str] = []
        summary = world.contextualizer(group_size=2).run(reingest=marking(world, jobs=jobs))
        assert summary.contexts_stored == 20 and summary.reingested_documents == 3 and jobs == ["job"]
        assert summary.awaiting_reingestion == 1 and list(summary.not_reingested) == [wiki]
        assert "not in S3" in summary.not_reingested[wiki]
        (left,) = pending(world).values()
        assert left.source == wiki and left.awaiting_reingestion and left.pending == []
        assert summary.pending_after == 0 and len(sidecars(world)) == 3
        again = world.contextualizer(group_size=2).run(reingest=marking(world, jobs=jobs))
        assert again.records == 0 and again.awaiting_reingestion == 1 and len(pending(world)) == 1
        assert jobs == ["job"]  # nothing marked: no ingestion job


def test_a_bucket_that_refuses_every_write_marks_nothing_starts_no_job_and_keeps_every_record() -> None:
    """Another account's bucket, or a read-only operator: each document said with S3's answer, no record
    settled as if re-ingested, no ingestion job; once writes are allowed, the next run marks them."""
    from botocore.exceptions import ClientError

    with LocalWorld(corpus(), BatchConfig(min_records=1)) as world:
        world.ingest("always")

        class ReadOnly:
            def __getattr__(self, name: str) -> Any:
                return getattr(world.s3, name)

            def put_object(self, **kwargs: Any) -> Any:
                if kwargs["Bucket"] == SOURCE:
                    raise ClientError({"Error": {"Code": "AccessDenied", "Message": "denied"}}, "PutObject")
                return world.s3.put_object(**kwargs)

        jobs: list[str] = []
        summary = world.contextualizer(group_size=2).run(reingest=marking(world, ReadOnly(), jobs))
        assert summary.awaiting_reingestion == 4 and summary.reingested_documents == 0 and jobs == []
        assert len(summary.not_reingested) == 4
        assert all("AccessDenied" in why for why in summary.not_reingested.values())
        assert len(pending(world)) == 4 and sidecars(world) == []
        fixed = world.contextualizer(group_size=2).run(reingest=marking(world, jobs=jobs))
        assert fixed.records == 0 and fixed.reingested_documents == 4 and jobs == ["job"]
        assert fixed.awaiting_reingestion == 0 and pending(world) == {} and len(sidecars(world)) == 4


def test_a_source_deleted_during_the_run_is_not_marked_and_its_record_is_dropped() -> None:
    with LocalWorld(corpus(), BatchConfig(min_records=1, step_seconds=0.1)) as world:
        world.ingest("always")

        def delete_one(line: str) -> None:
            if line.startswith("submitted"):
                world.s3.delete_object(Bucket=SOURCE, Key="doc_0")

        summary = world.contextualizer(log=delete_one, group_size=2).run(reingest=marking(world))
        assert summary.reingest_missing == 1 and summary.reingested_documents == 3
        assert "doc_0.metadata.json" not in sidecars(world) and len(sidecars(world)) == 3
        assert summary.awaiting_reingestion == 0 and pending(world) == {}


def test_a_run_stopped_before_its_reingestion_marks_the_documents_when_resumed() -> None:
    class StoppedHereError(Exception):
        pass

    with LocalWorld(corpus(), BatchConfig(min_records=1)) as world:
        world.ingest("always")

        def stop(_sources: list[str]) -> int:
            raise StoppedHereError

        with pytest.raises(StoppedHereError):
            world.contextualizer(group_size=2).run(reingest=stop)
        assert all(r.awaiting_reingestion and r.pending == [] for r in pending(world).values())
        summary = world.contextualizer(group_size=2).run(reingest=marking(world))
        assert summary.reingested_documents == 4 and pending(world) == {} and len(sidecars(world)) == 4


def test_ckb_contextualize_exits_non_zero_naming_each_document_it_could_not_mark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a stack whose source bucket refuses this operator's writes: the contexts are stored, no document
    is marked, no ingestion job starts (the stubbed agent would refuse one), each document is named with
    S3's answer and the command exits 1 in one line."""
    import boto3
    from botocore.exceptions import ClientError
    from botocore.stub import ANY, Stubber

    from contextual_kb.cli.main import app
    from contextual_kb.query import aws_clients

    values = {
        "KnowledgeBaseId": "KBID123456",
        "DataSourceId": "DSID123456",
        "SourceBucketName": SOURCE,
        "IntermediateBucketName": INTERMEDIATE,
        "BatchRoleArn": "arn:aws:iam::123456789012:role/ckb-batch",
    }
    stack = {
        "StackName": "ContextualKb",
        "CreationTime": "2026-11-23T00:00:00Z",
        "StackStatus": "CREATE_COMPLETE",
        "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in values.items()],
    }
    with LocalWorld(corpus(), BatchConfig(min_records=1)) as world:
        world.ingest("always")

        class ReadOnly:
            def __getattr__(self, name: str) -> Any:
                return getattr(world.s3, name)

            def put_object(self, **kwargs: Any) -> Any:
                if kwargs["Bucket"] == SOURCE:
                    raise ClientError({"Error": {"Code": "AccessDenied", "Message": "denied"}}, "PutObject")
                return world.s3.put_object(**kwargs)

        cloudformation = boto3.client("cloudformation", region_name="us-east-1")
        agent = boto3.client("bedrock-agent", region_name="us-east-1")
        real = aws_clients.client
        stubbed = {"cloudformation": cloudformation, "bedrock-agent": agent, "s3": ReadOnly()}
        monkeypatch.setattr(
            aws_clients,
            "client",
            lambda service, region=None, **c: stubbed.get(service) or real(service, region, **c),
        )
        with Stubber(cloudformation) as cfn, Stubber(agent) as jobs:
            cfn.add_response("describe_stacks", {"Stacks": [stack]})
            listed = {
                "knowledgeBaseId": "KBID123456",
                "dataSourceId": "DSID123456",
                "filters": ANY,
                "maxResults": 10,
            }
            jobs.add_response("list_ingestion_jobs", {"ingestionJobSummaries": []}, listed)
            args = ["contextualize", "--region", "us-east-1", "--min-records", "1", "--poll-seconds", "0.02"]
            result = CliRunner().invoke(app, [*args, "--group-size", "2", "--yes"])
            jobs.assert_no_pending_responses()
        assert result.exit_code == 1, result.output
        said = " ".join(result.output.split())
        for n in range(4):
            assert f"not re-ingested: s3://{SOURCE}/doc_{n}:" in said
        assert "error: 4 document(s) got their contexts but were not re-ingested" in " ".join(
            result.stderr.split()
        )
        assert len(pending(world)) == 4 and all(r.awaiting_reingestion for r in pending(world).values())


def test_a_run_stopped_inside_an_on_demand_slice_asks_that_slice_alone_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the docs promise of on-demand answers: kept a slice at a time, so a run stopped after a slice
    was answered and before it was kept pays that slice again, and no other."""
    from contextual_kb.deferred import contextualize

    class CrashedError(Exception):
        pass

    monkeypatch.setattr(contextualize, "ON_DEMAND_SLICE", 5)
    with LocalWorld(corpus(), BatchConfig(min_records=100)) as world:  # too few for a job: 12 on demand
        world.ingest("always")
        first = world.contextualizer(group_size=2)
        put, kept = first._put, {"n": 0}

        def crash_keeping_the_second_slice(key: str, body: bytes) -> None:
            kept["n"] += 1
            if kept["n"] == 2:
                raise CrashedError  # answered (paid), not kept
            put(key, body)

        first._put = crash_keeping_the_second_slice  # type: ignore[method-assign]
        with pytest.raises(CrashedError):
            first.run()
        assert world.model.stats.answered == 10
        summary = world.contextualizer(group_size=2).run()
        assert world.model.stats.answered == 17  # the second slice (5) again, and the last two
        assert summary.contexts_stored == 20 and summary.pending_after == 0


def test_the_reingestion_asks_the_model_only_for_the_chunks_still_pending() -> None:
    """What the docs promise of the re-ingestion: every context the run made is remembered (no call);
    the chunks whose records failed are asked on demand by the function (CONTEXT_DEFER=fallbacks)."""
    with LocalWorld(corpus(), BatchConfig(min_records=1, failed_records={"R0000000001"})) as world:
        world.ingest("always")
        summary = world.contextualizer(group_size=2).run(reingest=lambda _sources: world.reingest()[0])
        assert summary.pending_after == 2 and summary.contexts_stored == 18
        assert summary.model_calls_during_reingest is not None
        assert 1 <= summary.model_calls_during_reingest <= 2  # the two pending chunks (grouped or not)
        calls, again = world.reingest()
        assert calls == 0 and again.summary()["model"]["chunks_remembered"] == 20


def test_an_archived_source_is_not_marked_and_waits_named_while_glacier_ir_is_marked() -> None:
    with LocalWorld(corpus(), BatchConfig(min_records=1)) as world:
        for name, storage in (("doc_0", "GLACIER"), ("doc_1", "DEEP_ARCHIVE"), ("doc_2", "GLACIER_IR")):
            body = world.s3.get_object(Bucket=SOURCE, Key=name)["Body"].read()
            world.s3.put_object(Bucket=SOURCE, Key=name, Body=body, StorageClass=storage)
        world.ingest("always")  # archived after it was ingested (a lifecycle rule): not "changed" since
        summary = world.contextualizer(group_size=2).run(reingest=marking(world))
        assert summary.awaiting_reingestion == 2 and summary.reingested_documents == 2
        assert sorted(summary.not_reingested) == [f"s3://{SOURCE}/doc_0", f"s3://{SOURCE}/doc_1"]
        assert all("archived" in why for why in summary.not_reingested.values())
        assert sidecars(world) == ["doc_2.metadata.json", "doc_3.metadata.json"]


def test_one_text_chunked_two_ways_is_asked_for_each_and_both_stored_into_the_shared_contexts() -> None:
    """Two sources of one text recorded with other chunks (another data source's chunking): each asked for
    its own chunks, both merged into the one remembered-contexts object one after the other (stored side by
    side, one merge would overwrite the other), both settled."""
    with LocalWorld(with_copies()[:1] + with_copies()[4:5], BatchConfig(min_records=1)) as world:
        world.ingest("always")
        key, record = next((k, r) for k, r in pending(world).items() if r.source.endswith("copy_a"))
        spans = [*record.spans[:-2], (record.spans[-2][0], record.spans[-1][1])]
        again = record.model_copy(update={"spans": spans, "pending": list(range(len(spans)))})
        world.s3.put_object(Bucket=INTERMEDIATE, Key=key, Body=again.dump())
        summary = world.contextualizer(group_size=2).run()
        assert summary.same_text == 0 and summary.documents == 2 and summary.contexts_stored == 9
        assert summary.pending_after == 0 and pending(world) == {}


def test_the_quote_and_the_table_state_the_on_demand_assumption() -> None:
    from contextual_kb.cli.contextualize import _assumed

    assert _assumed([]) == ""
    said = _assumed(["global.anthropic.claude-sonnet-4-6"])
    assert "no batch prices known for global.anthropic.claude-sonnet-4-6" in said
    assert "priced at on-demand prices, an upper bound" in said and "--batch-prices" in said


def test_a_run_that_slept_past_its_lease_while_another_took_it_over_stops_before_storing() -> None:
    """A poll longer than the lease: the run is taken over meanwhile (the other stores the job's contexts,
    then stops); the first, awake, is refused before it merges anything into the remembered contexts (two
    merges could overwrite each other) or pays for anything; a third run finishes it."""
    from contextual_kb.deferred.contextualize import ContextualizeError

    class StoppedHereError(Exception):
        pass

    def stop(_state: Any) -> Any:
        raise StoppedHereError

    with LocalWorld(corpus(), BatchConfig(min_records=1, step_seconds=0.2)) as world:
        world.ingest("always")
        took: list[int] = []

        def long_poll(_seconds: float) -> None:
            if not took:
                second = world.contextualizer(group_size=2)
                second.claim.lease_seconds = 0  # the first's claim lapsed during its poll
                second._settle = stop  # type: ignore[method-assign]  # stored, then stopped
                with pytest.raises(StoppedHereError):
                    second.run()
                took.append(1)
            time.sleep(0.3)

        first = world.contextualizer(group_size=2)
        first.sleep = long_poll
        remember, merged = first._remember, []
        first._remember = lambda *args: merged.append(1) or remember(*args)  # type: ignore[method-assign]
        with pytest.raises(ContextualizeError, match="was taken over by another ckb contextualize"):
            first.run()
        assert took == [1] and merged == [] and creates(world) == 1
        summary = world.contextualizer(group_size=2).run()
        assert creates(world) == 1 and summary.contexts_stored == 20 and pending(world) == {}
