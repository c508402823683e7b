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
        assert 0 < summary.cost_usd < summary.floor_usd
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
            group_size=1, on_demand_retry=True, limits=Limits(min_records=1, max_records=2)
        )
        store, stored = contextualizer._store, []

        def then_resync(state: dict[str, Any], ids: list[str], *args: Any, batch: bool) -> list[str]:
            failed = store(state, ids, *args, batch=batch)
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

        def meanwhile() -> tuple[list[str], Any]:
            keys, dropped = usable()
            world.s3.delete_object(Bucket=INTERMEDIATE, Key=keys[0])
            world.s3.put_object(Bucket=INTERMEDIATE, Key=keys[1], Body=b"{not json")
            return keys, dropped

        planner._usable = meanwhile  # type: ignore[method-assign]
        summary = planner.run()
    assert summary.documents == 2 and summary.dropped == {"corrupt": 1}
