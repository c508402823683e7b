"""The workflow's step (``deferred/workflow.py``), as Step Functions runs it, against moto's S3 and the batch
inference stand-in: each execution one look, the waits between looks the workflow's. The CLI and the workflow
finish each other's runs and never run one at once; faults: a job that fails or expires, records missing
from an output, a job-end event never delivered (the schedule's look finishes the run), a step that timed out
and is retried, a CLI run meanwhile. Nothing lost, nothing submitted twice."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from contextual_kb.deferred.contextualize import Contextualizer
from contextual_kb.deferred.offline import INTERMEDIATE, LocalWorld
from contextual_kb.deferred.workflow import metrics_line, options_from_environment, run_age_seconds, step
from contextual_kb.local.batch_standin import BatchConfig
from tests.integration.test_contextualize import pending
from tests.support import corpus


def workflow(world: LocalWorld, execution: str = "exec-1", **options: Any) -> Contextualizer:
    """The step's contextualizer: not followed to the end, its claim owned by the execution."""
    contextualizer = world.contextualizer(group_size=2, follow=False, **options)
    contextualizer.claim.owner = f"workflow:{execution}"
    return contextualizer


def creates(world: LocalWorld) -> int:
    return sum(1 for operation, _ in world.standin.requests if operation == "CreateModelInvocationJob")


def until_done(world: LocalWorld, reingest: Any, limit: int = 200, **options: Any) -> list[dict[str, Any]]:
    """Scheduled looks (mode resume), each a new execution, until one is not ``waiting``."""
    results = []
    for n in range(limit):
        result = step({"mode": "resume"}, workflow(world, f"look-{n}", **options), reingest=reingest)
        results.append(result)
        if result["outcome"] != "waiting":
            return results
        time.sleep(0.05)
    raise AssertionError("the run never ended")


def test_the_workflow_plans_submits_waits_stores_and_reingests_and_a_second_look_asks_nothing() -> None:
    with LocalWorld(corpus(), BatchConfig(min_records=1, step_seconds=0.3)) as world:
        world.ingest("always")
        reingested: list[list[str]] = []

        def reingest(sources: list[str]) -> int:
            reingested.append(sources)
            return world.reingest()[0]

        first = step({"mode": "start"}, workflow(world), reingest=reingest)
        assert first["outcome"] == "waiting" and first["jobs_running"] == 1 and first["run"]
        # Left unfinished with its claim released: nobody holds it between looks.
        claim = json.loads(
            world.s3.get_object(Bucket=INTERMEDIATE, Key="contextual-kb/batch/current.json")["Body"].read()
        )
        assert claim["run"] == first["run"] and claim["owner"] == ""
        last = until_done(world, reingest)[-1]
        assert last["outcome"] == "done" and last["run"] == first["run"]
        summary = last["summary"]
        assert summary["contexts_stored"] == summary["pending_before"] == 20 and summary["pending_after"] == 0
        assert summary["model_calls_during_reingest"] == 0 and len(reingested) == 1
        assert pending(world) == {} and creates(world) == 1  # submitted once, whatever the looks
        again = step({"mode": "start"}, workflow(world, "exec-2"), reingest=reingest)
        assert again["outcome"] == "idle" and creates(world) == 1 and len(reingested) == 1
        assert step({"mode": "resume"}, workflow(world, "exec-3"), reingest=reingest)["outcome"] == "idle"


def test_a_run_the_cli_left_is_finished_by_the_workflow_and_the_other_way_round() -> None:
    class StoppedHereError(Exception):
        pass

    def stop(_seconds: float) -> None:
        raise StoppedHereError

    with LocalWorld(corpus(), BatchConfig(min_records=1, step_seconds=0.3)) as world:
        world.ingest("always")
        cli = world.contextualizer(group_size=2)
        cli.sleep = stop  # the operator's ckb contextualize stopped at its first poll (Ctrl-C)
        with pytest.raises(StoppedHereError):
            cli.run()
        last = until_done(world, None)[-1]
        assert last["outcome"] == "done" and last["summary"]["pending_after"] == 0 and creates(world) == 1
    with LocalWorld(corpus(), BatchConfig(min_records=1, step_seconds=0.3)) as world:
        world.ingest("always")
        first = step({"mode": "start"}, workflow(world), reingest=None)
        assert first["outcome"] == "waiting"
        summary = world.contextualizer(group_size=2).run()  # the CLI resumes it, follows it to the end
        assert summary.run == first["run"] and summary.pending_after == 0 and creates(world) == 1
        assert step({"mode": "resume"}, workflow(world, "exec-2"), reingest=None)["outcome"] == "idle"


def test_a_look_while_a_cli_run_holds_the_claim_does_nothing_and_says_busy() -> None:
    with LocalWorld(corpus(), BatchConfig(min_records=1, step_seconds=0.3)) as world:
        world.ingest("always")
        cli = world.contextualizer(group_size=2)
        seen: list[dict[str, Any]] = []

        def look_meanwhile(_seconds: float) -> None:  # the schedule's look, while the CLI polls
            if not seen:
                seen.append(step({"mode": "resume"}, workflow(world), reingest=None))
            time.sleep(0.05)

        cli.sleep = look_meanwhile
        summary = cli.run()
        assert seen[0]["outcome"] == "busy" and "under way" in seen[0]["summary"]["notes"][0]
        assert summary.pending_after == 0 and creates(world) == 1


def test_a_step_retried_after_a_timeout_takes_its_claim_back_at_once_another_execution_does_not() -> None:
    with LocalWorld(corpus(), BatchConfig(min_records=1, step_seconds=0.3)) as world:
        world.ingest("always")
        timed_out = workflow(world, "exec-1")
        run = timed_out.claim.take("20260101000000abcdef")  # its process killed while holding the claim
        assert run == "20260101000000abcdef"
        other = step({"mode": "start"}, workflow(world, "exec-2"), reingest=None)
        assert other["outcome"] == "busy" and creates(world) == 0
        retried = step({"mode": "start"}, workflow(world, "exec-1"), reingest=None)
        assert retried["outcome"] == "waiting" and creates(world) == 1
        assert until_done(world, None)[-1]["summary"]["pending_after"] == 0 and creates(world) == 1


@pytest.mark.parametrize("fault", [{"failed_jobs": 1}, {"expired_jobs": 1}])
def test_a_job_that_fails_or_expires_ends_the_run_with_its_chunks_pending_for_the_next(
    fault: dict[str, int],
) -> None:
    with LocalWorld(corpus(), BatchConfig(min_records=1, **fault)) as world:
        world.ingest("always")
        first = step({"mode": "start"}, workflow(world), reingest=None)
        # The job may have ended by the first look (on a loaded machine the plan takes longer than the
        # stand-in takes to fail it): the run then ends at that look, else at a later one.
        last = first if first["outcome"] != "waiting" else until_done(world, None)[-1]
        assert last["outcome"] == "done" and last["summary"]["jobs_failed"] == 1
        assert last["summary"]["pending_after"] == 20 and len(pending(world)) == 4
        again = step({"mode": "start"}, workflow(world, "exec-2"), reingest=None)
        last = again if again["outcome"] != "waiting" else until_done(world, None)[-1]
        assert last["summary"]["pending_after"] == 0 and pending(world) == {} and creates(world) == 2


def test_records_missing_from_an_output_are_counted_failed_and_stay_pending() -> None:
    faults = BatchConfig(min_records=1, missing_records={"R0000000002"}, failed_records={"R0000000001"})
    with LocalWorld(corpus(), faults) as world:
        world.ingest("always")
        step({"mode": "start"}, workflow(world), reingest=None)
        last = until_done(world, None)[-1]["summary"]
        assert last["failed_records"] == 2 and last["pending_after"] == 4
        assert last["contexts_stored"] + last["pending_after"] == last["pending_before"] == 20


def test_no_plan_while_an_ingestion_job_runs_and_nothing_to_resume_is_idle() -> None:
    with LocalWorld(corpus(), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        result = step({"mode": "start"}, workflow(world), reingest=None, ingestion_running=lambda: "JOB1")
        assert result["outcome"] == "ingesting" and creates(world) == 0 and len(pending(world)) == 4
        assert step({"mode": "resume"}, workflow(world), reingest=None)["outcome"] == "idle"
        with pytest.raises(ValueError, match="mode 'plan'"):
            step({"mode": "plan"}, workflow(world), reingest=None)


def test_the_step_reads_its_settings_and_reports_its_figures_as_embedded_metrics() -> None:
    options = options_from_environment(
        {"INTERMEDIATE_BUCKET": "b", "BATCH_ROLE_ARN": "arn:aws:iam::1:role/r", "CKB_BATCH_MIN_RECORDS": "7"}
    )
    assert (options.limits.min_records, options.follow, options.group_size) == (7, False, 40)
    assert run_age_seconds("20260101000000abcdef", clock=lambda: 1767225600.0 + 90) == 90.0
    line = json.loads(
        metrics_line(
            {
                "outcome": "done",
                "run_age_seconds": 0.0,
                "summary": {"run": "r", "failed_records": 3, "cost_usd": 0.5, "floor_usd": 1.0},
            }
        )
    )
    names = {m["Name"] for m in line["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert {"RunAgeSeconds", "FailedRecords", "CostUsd", "FloorUsd", "CostAboveFloorUsd"} <= names
    assert line["FailedRecords"] == 3 and line["CostAboveFloorUsd"] == 0.0


def test_status_shows_the_run_wherever_it_stands_and_the_workflows_looks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import boto3
    from typer.testing import CliRunner

    from contextual_kb.cli import contextualize as command
    from contextual_kb.cli.main import app
    from contextual_kb.deferred.status import run_status, start_workflow, workflow_runs
    from contextual_kb.query.deployment import Deployment

    with LocalWorld(corpus(), BatchConfig(min_records=1, step_seconds=0.3)) as world:
        assert run_status(world.s3, INTERMEDIATE)["phase"] == "none"
        world.ingest("always")
        first = step({"mode": "start"}, workflow(world), reingest=None)
        waiting = run_status(world.s3, INTERMEDIATE)
        assert (waiting["run"], waiting["phase"], waiting["under_way"]) == (first["run"], "submitted", True)
        assert waiting["held_by"].startswith("none") and waiting["pending"] == 20
        assert (waiting["jobs_submitted"], waiting["jobs_stored"], waiting["contexts_stored"]) == (1, 0, 0)
        until_done(world, None)
        done = run_status(world.s3, INTERMEDIATE)
        assert (done["run"], done["phase"], done["under_way"]) == (first["run"], "done", False)
        assert done["contexts_stored"] == 20 and done["jobs_stored"] == 1
        assert 0 < done["cost_usd"] < done["floor_usd"] and done["cost_vs_floor"] < 1

        states = boto3.client("stepfunctions", region_name="us-east-1")
        machine = states.create_state_machine(
            name="looks",
            definition=json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}),
            roleArn="arn:aws:iam::123456789012:role/sfn",
        )["stateMachineArn"]
        started = start_workflow(states, machine)
        (listed,) = workflow_runs(states, machine)
        assert started.endswith(listed["name"])
        described = states.describe_execution(executionArn=started)
        assert json.loads(described["input"]) == {"mode": "start"}

        deployment = Deployment(
            stack="ContextualKb",
            region="us-east-1",
            knowledge_base_id="KB",
            data_source_id="DS",
            source_bucket="docs",
            vector_store="s3vectors",
            intermediate_bucket=INTERMEDIATE,
            state_machine_arn=machine,
        )
        monkeypatch.setattr(command, "deployment_of", lambda _stack, _region: deployment)
        shown = CliRunner().invoke(app, ["contextualize", "--status", "--json"])
        assert shown.exit_code == 0, shown.output
        result = json.loads(shown.output)
        assert result["run"] == first["run"] and len(result["workflow"]) == 1
        table = CliRunner().invoke(app, ["contextualize", "--status"])
        assert table.exit_code == 0 and "cost / floor" in table.output and "latest looks" in table.output
        started_again = CliRunner().invoke(app, ["contextualize", "--workflow", "--json"])
        assert started_again.exit_code == 0 and len(workflow_runs(states, machine)) == 2
        monkeypatch.setattr(
            command,
            "deployment_of",
            lambda _stack, _region: Deployment(
                stack="ContextualKb",
                region="us-east-1",
                knowledge_base_id="KB",
                data_source_id="DS",
                source_bucket="docs",
                vector_store="s3vectors",
                intermediate_bucket=INTERMEDIATE,
            ),
        )
        refused = CliRunner().invoke(app, ["contextualize", "--workflow"])
        assert refused.exit_code == 1 and "has no deferred workflow" in refused.output


def test_a_runs_age_is_read_from_its_name_in_utc_whatever_the_operators_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run the CLI planned ten hours west of UTC is not ten hours old to the workflow's stuck alarm."""
    from contextual_kb.deferred.sequence import new_run as _new_run

    monkeypatch.setenv("TZ", "Etc/GMT+10")
    time.tzset()
    try:
        assert run_age_seconds(_new_run()) < 60
    finally:
        monkeypatch.undo()
        time.tzset()


def test_ckb_contextualize_while_a_look_holds_the_run_says_the_workflow_has_it() -> None:
    from contextual_kb.deferred.claim import BusyError

    with LocalWorld(corpus(), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        workflow(world, "exec-9").claim.take("20260101000000abcdef")  # a look under way
        with pytest.raises(
            BusyError, match=r"under way in the stack's deferred workflow \(execution exec-9\)"
        ):
            world.contextualizer(group_size=2).run()
        assert creates(world) == 0
