"""A run in shards (``deferred/shards.py``) against moto's S3 and the batch inference stand-in: planned and
stored a shard at a time, by ``ckb contextualize`` in its own process and by the workflow's Distributed
Map children (each shard its own process, its own contextualizer, joining the execution's claim). The same
end as a run in one piece: every chunk a model context, nothing paid twice, a second run asking nothing;
and the run's state object does not grow with the corpus. Faults: a job that fails or expires, an output
file missing, records missing from one, a shard stopped midway and retried, a shard run twice, a CLI run
meanwhile, a claim taken over."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from contextual_kb.deferred import shards as sharded
from contextual_kb.deferred.claim import BusyError, TakenOverError
from contextual_kb.deferred.contextualize import Contextualizer
from contextual_kb.deferred.offline import INTERMEDIATE, LocalWorld
from contextual_kb.deferred.reingest import Reingested
from contextual_kb.deferred.workflow import shard, step
from contextual_kb.local.batch_standin import BatchConfig
from tests.integration.test_contextualize import billed, pending
from tests.support import corpus

BATCH = "contextual-kb/batch/"


def creates(world: LocalWorld) -> int:
    return sum(1 for operation, _ in world.standin.requests if operation == "CreateModelInvocationJob")


def here(world: LocalWorld, shards: int = 1, **options: Any) -> tuple[Contextualizer, list[str]]:
    """``ckb contextualize`` running a sharded run itself: documents marked shard by shard, one ingestion
    (the handler again) at the end."""
    contextualizer = world.contextualizer(group_size=2, shard_documents=shards, **options)
    marked: list[str] = []

    def mark(sources: list[str]) -> Reingested:
        marked.extend(sources)
        return Reingested(marked=sources)

    contextualizer.start_ingestion = lambda: ("local-job COMPLETE", world.reingest()[0])
    contextualizer.mark = mark  # type: ignore[attr-defined]
    return contextualizer, marked


def state_of(world: LocalWorld, run: str) -> dict[str, Any]:
    body = world.s3.get_object(Bucket=INTERMEDIATE, Key=f"{BATCH}{run}/state.json")["Body"].read()
    return dict(json.loads(body))


def keys(world: LocalWorld, prefix: str) -> list[str]:
    listed = world.s3.list_objects_v2(Bucket=INTERMEDIATE, Prefix=prefix).get("Contents", [])
    return [o["Key"] for o in listed]


def test_a_run_in_shards_gives_every_chunk_a_context_once_and_its_state_stays_small() -> None:
    with LocalWorld(corpus(documents=6), BatchConfig(min_records=1, duplicate_records=True)) as world:
        world.ingest("always")
        contextualizer, marked = here(world, shards=2)
        summary = contextualizer.run(reingest=contextualizer.mark)  # type: ignore[attr-defined]
        assert summary.shards == 3 and summary.jobs == 1 and creates(world) == 1
        assert summary.documents == 6 and summary.contexts_stored == summary.pending_before == 30
        assert summary.model_contexts == 30 and summary.pending_after == 0 and summary.failed_records == 0
        assert pending(world) == {} and sorted(marked) == sorted(
            f"s3://ckb-local-source/doc_{d}" for d in range(6)
        )
        assert summary.reingested_documents == 6 and summary.model_calls_during_reingest == 0
        # One job, one input file a shard, one output file each (as Bedrock writes them).
        outputs = [k for k in keys(world, BATCH) if k.endswith(".jsonl.out")]
        assert len(outputs) == 3
        # Every line charged (each written twice here), and the floor of the documents once.
        assert (summary.input_tokens, summary.output_tokens) == billed(world)
        assert summary.cost_usd > 0 and summary.floor_usd > 0
        # The run's state holds no record nor document: those are the shards'.
        state = state_of(world, summary.run)
        assert state["records"] == {} and state["documents"] == {} and state["phase"] == "done"
        assert len(json.dumps(state)) < 5_000
        # A second run asks nothing.
        again, _ = here(world, shards=2)
        second = again.run(reingest=again.mark)  # type: ignore[attr-defined]
        assert second.records == 0 and creates(world) == 1


def test_a_run_in_shards_ends_as_the_same_run_in_one_piece() -> None:
    figures = []
    for shards in (0, 1):
        with LocalWorld(corpus(documents=5), BatchConfig(min_records=1)) as world:
            world.ingest("always")
            contextualizer, _ = here(world, shards=shards)
            s = contextualizer.run(reingest=contextualizer.mark)  # type: ignore[attr-defined]
            counts = (s.documents, s.records, s.contexts_stored, s.model_contexts, s.pending_after)
            figures.append(
                (*counts, s.input_tokens, s.output_tokens, round(s.cost_usd, 9), round(s.floor_usd, 9))
            )
    assert figures[0] == figures[1]


def fan_out(
    world: LocalWorld, execution: str, result: dict[str, Any], **options: Any
) -> list[dict[str, Any]]:
    """The state machine's Distributed Map: the manifest read, each shard a child with its own
    contextualizer (its own process on AWS) and the execution's claim."""
    items = json.loads(world.s3.get_object(Bucket=result["bucket"], Key=result["manifest"])["Body"].read())
    action = {"plan": "plan-shard", "store": "store-shard"}[result["outcome"]]
    done = []
    for item in items:
        child = workflow_contextualizer(world, execution, **options)
        done.append(shard({"action": action, **item}, child, reingest=lambda s: Reingested(marked=s)))
    return done


def workflow_contextualizer(world: LocalWorld, execution: str, **options: Any) -> Contextualizer:
    options = {"group_size": 2, "follow": False, "shard_documents": 1, "fan_out": True, **options}
    contextualizer = world.contextualizer(**options)
    contextualizer.claim.owner = f"workflow:{execution}"
    contextualizer.start_ingestion = lambda: ("local-job COMPLETE", world.reingest()[0])
    return contextualizer


def execution(world: LocalWorld, name: str, mode: str, limit: int = 200, **options: Any) -> list[str]:
    """One execution of the state machine: looks, and a Map after a look that asks for one; its outcomes."""
    outcomes = []
    for _ in range(limit):
        look = workflow_contextualizer(world, name, **options)
        result = step({"mode": mode}, look, reingest=lambda s: Reingested(marked=s))
        outcomes.append(result["outcome"])
        if result["outcome"] not in {"plan", "store"}:
            return outcomes
        assert result["manifest"].startswith(f"{BATCH}{result['run']}/")
        assert result["execution"] == name  # the claim's owner, which the Map hands its children
        fan_out(world, result["execution"], result, **options)
        mode = "resume"
    raise AssertionError("the execution never ended")


def resume_until_jobs_end(world: LocalWorld, first: int) -> list[str]:
    """Resume executions (named exec-<first>, exec-<first + 1>...) as the schedule starts them, until one does
    more than wait for the jobs; its outcomes."""
    outcomes: list[str] = []
    for n in range(first, first + 100):
        outcomes = execution(world, f"exec-{n}", "resume")
        if outcomes[-1] != "waiting":
            break
        time.sleep(0.1)
    return outcomes


def test_the_workflow_fans_the_plan_and_the_store_out_over_its_shards() -> None:
    with LocalWorld(corpus(documents=4), BatchConfig(min_records=1, step_seconds=0.2)) as world:
        world.ingest("always")
        first = execution(world, "exec-1", "start")
        assert first == ["plan", "waiting"] and creates(world) == 1
        # While the jobs run, the claim is released: a CLI run would resume it.
        claim = json.loads(
            world.s3.get_object(Bucket=INTERMEDIATE, Key=f"{BATCH}current.json")["Body"].read()
        )
        assert claim["owner"] == ""
        outcomes = resume_until_jobs_end(world, first=2)
        assert outcomes == ["store", "done"]
        run = claim["run"]
        summary = state_of(world, run)["summary"]
        assert summary["shards"] == 4 and summary["contexts_stored"] == summary["pending_before"] == 20
        assert summary["pending_after"] == 0 and summary["model_calls_during_reingest"] == 0
        assert pending(world) == {} and creates(world) == 1
        assert execution(world, "exec-last", "start") == ["idle"] and creates(world) == 1


@pytest.mark.parametrize(
    ("fault", "status"), [({"failed_jobs": 1}, "Failed"), ({"expired_jobs": 1}, "Expired")]
)
def test_a_job_of_a_sharded_run_that_fails_or_expires_leaves_every_shards_chunks_pending(
    fault: dict[str, int], status: str
) -> None:
    lines: list[str] = []
    with LocalWorld(corpus(documents=4), BatchConfig(min_records=1, **fault)) as world:
        world.ingest("always")
        contextualizer, marked = here(world, shards=2, log=lines.append)
        summary = contextualizer.run(reingest=contextualizer.mark)  # type: ignore[attr-defined]
        assert summary.jobs_failed == 1 and summary.contexts_stored == 0 and marked == []
        assert summary.pending_after == summary.pending_before == 20 and len(pending(world)) == 4
        assert any(status in line and "its chunks stay pending" in line for line in lines)
        again, _ = here(world, shards=2)
        second = again.run(reingest=again.mark)  # type: ignore[attr-defined]
        assert second.contexts_stored == 20 and second.pending_after == 0 and creates(world) == 2


def test_an_output_file_missing_or_partial_leaves_those_records_pending_counted() -> None:
    faults = BatchConfig(min_records=1, missing_output_files=1, missing_records={"S0001000001"})
    with LocalWorld(corpus(documents=4), faults) as world:
        world.ingest("always")
        contextualizer, _ = here(world, shards=1)
        summary = contextualizer.run(reingest=contextualizer.mark)  # type: ignore[attr-defined]
        # Shard 0's output file is missing (its 3 records, 5 chunks), shard 1 lost one record (2 chunks).
        assert summary.failed_records == 4 and summary.pending_after == 7
        assert summary.contexts_stored + summary.pending_after == summary.pending_before == 20
        left = pending(world)
        assert sorted(len(r.pending) for r in left.values()) == [2, 5]
        again, _ = here(world, shards=1)
        assert again.run(reingest=again.mark).pending_after == 0  # type: ignore[attr-defined]
        assert pending(world) == {}


def test_a_shard_stopped_midway_is_retried_and_a_shard_run_twice_repeats_nothing() -> None:
    class StoppedHereError(Exception):
        pass

    with LocalWorld(corpus(documents=4), BatchConfig(min_records=1, step_seconds=0.05)) as world:
        world.ingest("always")
        assert execution(world, "exec-1", "start")[0] == "plan"
        for _ in range(200):
            look = workflow_contextualizer(world, "exec-2")
            result = step({"mode": "resume"}, look, reingest=None)
            if result["outcome"] != "waiting":
                break
            time.sleep(0.05)
        assert result["outcome"] == "store"
        items = json.loads(world.s3.get_object(Bucket=INTERMEDIATE, Key=result["manifest"])["Body"].read())
        # Shard 0's child dies after its first settle write (a timeout): Step Functions retries it.
        broken = workflow_contextualizer(world, "exec-2")

        def stop(_state: dict[str, Any]) -> dict[str, int]:
            raise StoppedHereError

        broken._settle = stop  # type: ignore[method-assign]
        with pytest.raises(StoppedHereError):
            shard({"action": "store-shard", **items[0]}, broken, reingest=None)
        before = billed(world)
        for item in items:
            shard({"action": "store-shard", **item}, workflow_contextualizer(world, "exec-2"), reingest=None)
        # And once more (a redriven Map): each shard's result stands, nothing stored or charged again.
        again = [
            shard({"action": "store-shard", **item}, workflow_contextualizer(world, "exec-2"), reingest=None)
            for item in items
        ]
        assert sum(r["contexts_stored"] for r in again) == 20 and billed(world) == before
        last = step({"mode": "resume"}, workflow_contextualizer(world, "exec-2"), reingest=None)
        assert last["outcome"] == "done" and last["summary"]["contexts_stored"] == 20
        assert last["summary"]["pending_after"] == 0 and creates(world) == 1
        # Tokens charged once per output line, the retried shard's too.
        assert (last["summary"]["input_tokens"], last["summary"]["output_tokens"]) == billed(world)


def test_a_cli_run_meanwhile_is_refused_and_a_shard_of_a_run_taken_over_stops() -> None:
    with LocalWorld(corpus(documents=4), BatchConfig(min_records=1, step_seconds=0.05)) as world:
        world.ingest("always")
        look = workflow_contextualizer(world, "exec-1")
        result = step({"mode": "start"}, look, reingest=None)
        assert result["outcome"] == "plan"
        # The execution's Map runs: the claim is kept for its shards; a CLI run is refused.
        cli, _ = here(world, shards=1)
        with pytest.raises(BusyError):
            cli.run(reingest=cli.mark)  # type: ignore[attr-defined]
        # A shard given another execution's name (a dead one's, or a Map wired wrong) stops before it
        # writes anything, and raises: retried, then the dead end, which pages.
        with pytest.raises(TakenOverError, match="no longer held") as raised:
            shard({"action": "plan-shard", "run": result["run"], "shard": 0},
                  workflow_contextualizer(world, "exec-other"), reingest=None)  # fmt: skip
        assert raised.value.holder == "workflow:exec-1"
        assert keys(world, f"{BATCH}{result['run']}/shards/00000/summary.json") == []
        # The execution dies here; once its claim lapses, the CLI takes the run over and finishes it,
        # planning the shards the Map did not.
        cli.claim.lease_seconds = 0.0
        summary = cli.run(reingest=cli.mark)  # type: ignore[attr-defined]
        assert summary.run == result["run"] and summary.shards == 4
        assert summary.contexts_stored == 20 and summary.pending_after == 0 and creates(world) == 1
        assert sharded.manifest_key(summary.run, cli) in keys(world, f"{BATCH}{summary.run}/plan/")


def test_a_cli_taking_the_run_over_during_a_map_ends_its_children_quietly() -> None:
    """The review's case: the execution's claim lapsed while its Map ran (children throttled for long), a ckb
    contextualize took the run over. The Map's children must end without an error (an error is retried,
    then pages ContextualizeDeadEnd) and without writing anything; the look after the Map answers busy
    while the CLI holds the run, idle once it finished it."""
    with LocalWorld(corpus(documents=4), BatchConfig(min_records=1, step_seconds=0.05)) as world:
        world.ingest("always")
        result = step({"mode": "start"}, workflow_contextualizer(world, "exec-1"), reingest=None)
        assert result["outcome"] == "plan"
        cli, _ = here(world, shards=1)
        cli.claim.lease_seconds = 0.0  # the execution's claim has lapsed: the CLI takes the run over
        assert cli.claim.take(result["run"]) == result["run"]
        child = shard({"action": "plan-shard", "run": result["run"], "shard": 0},
                      workflow_contextualizer(world, "exec-1"), reingest=None)  # fmt: skip
        assert child["outcome"] == "taken-over" and child["records"] == 0
        # Only what the listing look wrote (the shard's keys): the child wrote nothing.
        folder = f"{BATCH}{result['run']}/shards/00000/"
        assert keys(world, folder) == [f"{folder}keys.txt"]
        look = step({"mode": "resume"}, workflow_contextualizer(world, "exec-1"), reingest=None)
        assert look["outcome"] == "busy"
        # The CLI goes on and finishes the run; a child of the old Map still running ends quietly too.
        cli.claim.release()
        summary = cli.run(reingest=cli.mark)  # type: ignore[attr-defined]
        assert summary.run == result["run"] and summary.pending_after == 0 and creates(world) == 1
        late = shard({"action": "store-shard", "run": result["run"], "shard": 1},
                     workflow_contextualizer(world, "exec-1"), reingest=None)  # fmt: skip
        assert late["outcome"] == "taken-over"
        look = step({"mode": "resume"}, workflow_contextualizer(world, "exec-1"), reingest=None)
        assert look["outcome"] == "idle"
        assert creates(world) == 1


def test_a_later_execution_taking_the_run_over_ends_the_first_maps_children_quietly() -> None:
    """The likelier takeover: the first execution's claim lapsed during its Map and a scheduled execution
    took the run over (the claim says whom from). The first Map's children end quietly, writing nothing;
    the second execution's Map finishes the run with one job. A child given an owner the run was not taken
    from still raises (a Map wired wrong would otherwise loop quietly)."""
    with LocalWorld(corpus(documents=4), BatchConfig(min_records=1, step_seconds=0.05)) as world:
        world.ingest("always")
        result = step({"mode": "start"}, workflow_contextualizer(world, "exec-1"), reingest=None)
        assert result["outcome"] == "plan"
        second = workflow_contextualizer(world, "exec-2")
        second.claim.lease_seconds = 0.0  # exec-1's claim has lapsed
        again = step({"mode": "resume"}, second, reingest=None)
        assert again["outcome"] == "plan" and again["run"] == result["run"] and again["execution"] == "exec-2"
        child = shard({"action": "plan-shard", "run": result["run"], "shard": 0},
                      workflow_contextualizer(world, "exec-1"), reingest=None)  # fmt: skip
        assert child["outcome"] == "taken-over"
        folder = f"{BATCH}{result['run']}/shards/00000/"
        assert keys(world, folder) == [f"{folder}keys.txt"]
        with pytest.raises(TakenOverError, match="no longer held"):
            shard({"action": "plan-shard", "run": result["run"], "shard": 0},
                  workflow_contextualizer(world, "exec-3"), reingest=None)  # fmt: skip
        assert execution(world, "exec-2", "resume") == ["plan", "waiting"]  # its Map, then the jobs run
        assert resume_until_jobs_end(world, first=4)[-1] == "done" and creates(world) == 1
        assert pending(world) == {}


def test_a_shard_taken_over_midway_stops_quietly_and_the_run_ends_once() -> None:
    """The claim lapses while a child works (its renewal, before a write, finds a CLI holding the run): the
    child ends quietly; the CLI finishes the run with one job and every chunk once."""
    with LocalWorld(corpus(documents=4), BatchConfig(min_records=1, step_seconds=0.05)) as world:
        world.ingest("always")
        result = step({"mode": "start"}, workflow_contextualizer(world, "exec-1"), reingest=None)
        cli, _ = here(world, shards=1)
        cli.claim.lease_seconds = 0.0
        child_contextualizer = workflow_contextualizer(world, "exec-1")
        renew = child_contextualizer.claim.renew
        calls: list[int] = []

        def renew_after_a_takeover(**kwargs: Any) -> None:
            calls.append(1)
            if len(calls) == 2:  # the first is the join's own; the next is the shard's, before it writes
                cli.claim.take(result["run"])
            renew(**kwargs)

        child_contextualizer.claim.renew = renew_after_a_takeover  # type: ignore[method-assign]
        child = shard({"action": "plan-shard", "run": result["run"], "shard": 0},
                      child_contextualizer, reingest=None)  # fmt: skip
        assert len(calls) >= 2 and child["outcome"] == "taken-over"
        cli.claim.release()
        summary = cli.run(reingest=cli.mark)  # type: ignore[attr-defined]
        assert summary.run == result["run"] and summary.pending_after == 0 and creates(world) == 1
        assert summary.contexts_stored == 20


def test_ckb_contextualize_local_in_shards_ends_as_in_one_piece(tmp_path: Any) -> None:
    """``--shard-documents``: the CLI runs the shards itself, one after the other; the same summary."""
    from typer.testing import CliRunner

    from contextual_kb.cli.main import app

    path = tmp_path / "corpus.json"
    path.write_text(json.dumps(corpus(documents=6)))
    results = []
    for shards in ("0", "2"):
        ran = CliRunner().invoke(
            app, ["contextualize", "--local", "--corpus", str(path), "--json", "--group-size", "2",
                  "--shard-documents", shards],
        )  # fmt: skip
        assert ran.exit_code == 0, ran.output
        results.append(json.loads(ran.stdout))
    one, sharded = results
    assert (one["shards"], sharded["shards"]) == (0, 3)
    for key in ("documents", "records", "model_contexts", "pending_after", "model_calls_during_reingest",
                "cost_usd", "floor_usd", "cost_vs_floor", "reingested_documents"):  # fmt: skip
        assert one[key] == sharded[key], key
    assert sharded["pending_after"] == 0 and sharded["model_calls_during_reingest"] == 0


def test_a_sharded_run_the_cli_left_is_finished_by_the_workflows_maps() -> None:
    class StoppedHereError(Exception):
        pass

    def stop(_seconds: float) -> None:
        raise StoppedHereError

    with LocalWorld(corpus(documents=4), BatchConfig(min_records=1, step_seconds=0.2)) as world:
        world.ingest("always")
        cli, marked = here(world, shards=1)
        cli.sleep = stop  # stopped at its first wait for the job: the run is left, its claim released
        with pytest.raises(StoppedHereError):
            cli.run(reingest=cli.mark)  # type: ignore[attr-defined]
        assert creates(world) == 1 and marked == []
        outcomes = resume_until_jobs_end(world, first=0)
        assert outcomes == ["store", "done"] and creates(world) == 1
        assert pending(world) == {}


def test_status_counts_a_sharded_runs_records_and_jobs_from_its_summary() -> None:
    from contextual_kb.deferred.status import run_status

    with LocalWorld(corpus(documents=4), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        contextualizer, _ = here(world, shards=2)
        summary = contextualizer.run(reingest=contextualizer.mark)  # type: ignore[attr-defined]
        shown = run_status(world.s3, INTERMEDIATE)
        assert shown["phase"] == "done" and shown["shards"] == 2
        assert shown["records"] == summary.records == 12 and shown["jobs"][0]["records"] == 12
        assert shown["jobs_submitted"] == shown["jobs_stored"] == 1


def test_records_too_few_for_a_job_are_asked_on_demand_by_their_shards_and_failed_ones_retried() -> None:
    from contextual_kb.deferred.records import Limits

    with LocalWorld(corpus(documents=4), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        contextualizer, _ = here(world, shards=2, limits=Limits(min_records=100))
        summary = contextualizer.run(reingest=contextualizer.mark)  # type: ignore[attr-defined]
        assert summary.jobs == 0 and creates(world) == 0 and summary.on_demand_records == 12
        assert summary.contexts_stored == 20 and summary.pending_after == 0 and pending(world) == {}
        assert world.model.stats.answered == 12  # each record once
    faults = BatchConfig(min_records=1, failed_records={"S0001000002"})
    with LocalWorld(corpus(documents=4), faults) as world:
        world.ingest("always")
        contextualizer, _ = here(world, shards=2, on_demand_retry=True)
        summary = contextualizer.run(reingest=contextualizer.mark)  # type: ignore[attr-defined]
        assert summary.failed_records == 0 and summary.pending_after == 0 and summary.contexts_stored == 20
        assert world.model.stats.answered == 1  # the failed record alone, asked again by its shard


def test_a_dry_run_with_a_sharded_run_unfinished_leaves_its_documents_out_of_the_quote() -> None:
    with LocalWorld(corpus(documents=4), BatchConfig(min_records=1, step_seconds=0.2)) as world:
        world.ingest("always")
        assert execution(world, "exec-1", "start")[-1] == "waiting"
        quote = world.contextualizer(group_size=2, dry_run=True).run()
        assert quote.documents == 0 and quote.records == 0
        assert any("is unfinished" in note and "4 document(s)" in note for note in quote.notes)


def test_a_shards_input_file_uploaded_in_parts_is_copied_into_its_jobs_folder_readable() -> None:
    """A shard's input file past 8 MB is uploaded in parts: its copy in the job's folder gets a checksum
    of its own, so a reader that checks checksums (boto3's) reads it (moto kept the parts' one: refused)."""
    import io

    with LocalWorld(corpus(documents=1), BatchConfig(min_records=1)) as world:
        body = b'{"recordId": "S0000000001", "modelInput": {}}\n' * 200_000  # 9.4 MB
        world.s3.upload_fileobj(io.BytesIO(body), INTERMEDIATE, "shard.jsonl")
        sharded.copy_piece(("job/shard.jsonl", "shard.jsonl"), world.contextualizer())
        assert world.s3.get_object(Bucket=INTERMEDIATE, Key="job/shard.jsonl")["Body"].read() == body


def test_the_listing_reads_the_records_folders_side_by_side_and_cuts_only_between_texts() -> None:
    """Keys as the function writes them (``pending/<fingerprint>/<2 hex>/<text>/<source>.json``, and the
    older ``.../<text>.json`` with no source): listed a two-hex-digit folder at a time, side by side, every
    key once, in order; a shard is cut between two texts, never inside one's records (two sources of one
    text), and each older key is a text of its own (not its whole folder)."""
    import boto3
    from moto import mock_aws

    from contextual_kb.deferred.contextualize import Options

    keys = []
    for fingerprint in ("fpA", "fpB"):
        for n in range(300):
            if n % 3:  # two sources of one text
                digest = f"{n * 7919 % 65536:04x}" + "0" * 60
                text = f"contextual-kb/pending/{fingerprint}/{digest[:2]}/{digest}"
                keys += [f"{text}/{'1' * 32}.json", f"{text}/{'2' * 32}.json"]
            else:  # older keys, a hundred in one folder
                keys.append(f"contextual-kb/pending/{fingerprint}/aa/aa{n:062x}.json")
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="bucket-x")
        for key in keys:
            s3.put_object(Bucket="bucket-x", Key=key, Body=b"{}")
        prefixes: list[str] = []
        s3.meta.events.register(
            "before-parameter-build.s3.ListObjectsV2", lambda params, **_: prefixes.append(params["Prefix"])
        )
        lister = Contextualizer(s3, None, Options(bucket="bucket-x", role_arn="", shard_documents=5))
        run = "20260101000000listed"
        lister.claim.take(run)
        count = sharded.list_shards(sharded.new_state(run), lister)
        listed = [
            s3.get_object(Bucket="bucket-x", Key=sharded.shard_folder(run, n, lister) + "keys.txt")["Body"]
            .read()
            .decode()
            .split("\n")
            for n in range(count)
        ]
        manifest = s3.get_object(Bucket="bucket-x", Key=sharded.manifest_key(run, lister))["Body"].read()
    assert [key for shard in listed for key in shard] == sorted(keys)
    assert all(5 <= len(shard) <= 6 for shard in listed[:-1])  # cut at 5, or at 6 not to split a text
    shard_of = {key: n for n, shard in enumerate(listed) for key in shard}
    texts: dict[str, set[int]] = {}
    for key in keys:
        texts.setdefault(key.rsplit("/", 1)[0] if key.count("/") == 5 else key, set()).add(shard_of[key])
    assert all(len(found) == 1 for found in texts.values())
    assert [item["shard"] for item in json.loads(manifest)] == list(range(count))
    # A folder of two hex digits at a time (each fingerprint's found first).
    folders = {
        key.rsplit("/", 2)[0] + "/" if key.count("/") == 5 else key.rsplit("/", 1)[0] + "/" for key in keys
    }
    assert folders <= set(prefixes)


def test_a_sharded_cli_run_is_quoted_before_anything_is_paid_and_a_no_stops_it() -> None:
    class DeclinedError(Exception):
        pass

    quotes: list[Any] = []

    def decline(quote: Any) -> None:
        quotes.append(quote)
        raise DeclinedError

    with LocalWorld(corpus(documents=4), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        contextualizer, marked = here(world, shards=2)
        contextualizer.confirm = decline
        with pytest.raises(DeclinedError):
            contextualizer.run(reingest=contextualizer.mark)  # type: ignore[attr-defined]
        (quote,) = quotes
        assert quote.estimated and quote.records == 12 and quote.documents == 4 and quote.cost_usd > 0
        assert creates(world) == 0 and marked == [] and len(pending(world)) == 4
        # Declined, the run is left: the next run resumes it (quoted again) and finishes it.
        again, _ = here(world, shards=2)
        again.confirm = quotes.append
        summary = again.run(reingest=again.mark)  # type: ignore[attr-defined]
        assert len(quotes) == 2 and summary.contexts_stored == 20 and creates(world) == 1
