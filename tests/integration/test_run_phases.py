"""Each phase of a deferred run alone (``deferred/sequence.py``): a run begun, then one step at a time, the
state read back from S3 between steps as another process would (a step never relies on what the one before
kept in memory), each step moving it to the next phase; in one piece and in shards."""

from __future__ import annotations

from typing import Any

from contextual_kb.deferred import sequence
from contextual_kb.deferred.contextualize import Contextualizer
from contextual_kb.deferred.offline import LocalWorld
from contextual_kb.deferred.reingest import Reingested
from contextual_kb.deferred.state import RunState
from contextual_kb.local.batch_standin import BatchConfig
from tests.integration.test_contextualize import pending
from tests.support import corpus


def marked(sources: list[str]) -> Reingested:
    return Reingested(marked=sources)


def phase_by_phase(world: LocalWorld, **options: Any) -> list[tuple[str, str]]:
    """The run's phases, each done by a contextualizer of its own (its own process, as the workflow's
    looks are), under the claim the first took: (phase before, phase after) each."""
    first = world.contextualizer(group_size=2, follow=True, **options)
    begun = sequence.begin(first, first.claim.take(sequence.new_run()))
    assert isinstance(begun, RunState)
    run, steps = begun.run, []
    while True:
        work: Contextualizer = world.contextualizer(group_size=2, follow=True, **options)
        work.claim.owner = first.claim.owner
        work.claim.join(run)
        state = work._load(run)
        assert state is not None
        before = state.phase
        stop = sequence.advance(state, work, marked)
        after = work._load(run)
        assert after is not None
        steps.append((before, after.phase))
        if stop is not None:
            assert after.phase == "done" and stop.contexts_stored == stop.pending_before > 0
            return steps


def test_a_run_in_one_piece_goes_through_each_phase_alone() -> None:
    with LocalWorld(corpus(documents=3), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        steps = phase_by_phase(world)
        assert steps == [
            ("planned", "submitted"),
            ("submitted", "stored"),
            ("stored", "settled"),
            ("settled", "done"),
        ]
        assert pending(world) == {}


def test_a_run_in_shards_goes_through_each_phase_alone() -> None:
    with LocalWorld(corpus(documents=3), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        steps = phase_by_phase(world, shard_documents=1)
        assert steps == [
            ("listed", "planned"),
            ("planned", "submitted"),
            ("submitted", "collected"),
            ("collected", "done"),
        ]
        assert pending(world) == {}


def test_a_step_stops_where_the_workflow_waits_and_fans_out() -> None:
    """Not followed, a look at running jobs stops the run there (the state still ``submitted``); fanned out,
    the shards' plan is left to the Map (the state still ``listed``)."""
    with LocalWorld(corpus(documents=2), BatchConfig(min_records=1, step_seconds=0.5)) as world:
        world.ingest("always")
        work = world.contextualizer(group_size=2, follow=False)
        state = sequence.begin(work, work.claim.take(sequence.new_run()))
        assert isinstance(state, RunState)
        assert sequence.advance(state, work, marked) is None and state.phase == "submitted"
        stop = sequence.advance(state, work, marked)
        assert stop is not None and stop.jobs_running == 1 and state.phase == "submitted"
        work.claim.release()
    with LocalWorld(corpus(documents=2), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        work = world.contextualizer(group_size=2, follow=False, fan_out=True, shard_documents=1)
        state = sequence.begin(work, work.claim.take(sequence.new_run()))
        assert isinstance(state, RunState)
        stop = sequence.advance(state, work, marked)
        assert stop is not None and stop.fan_out == "plan" and stop.shards == 2 and state.phase == "listed"
