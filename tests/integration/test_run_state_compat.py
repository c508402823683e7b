"""A run left by an earlier version resumes: what ``ckb contextualize`` (commit 436dcc0, before the deferred
path became phases over a typed run state) left in S3 when it stopped between its plan and its jobs'
submission, captured whole (the run's state, its claim, its shards' states and inputs, the pending records)
and put back into a fresh local world; today's code takes the run over and ends it, asking no new plan."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from contextual_kb.deferred.offline import INTERMEDIATE, LocalWorld
from contextual_kb.local.batch_standin import BatchConfig
from tests.support import corpus

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize(("fixture", "shards"), [("run_state_v0_one_piece", 0), ("run_state_v0_sharded", 2)])
def test_a_run_left_planned_by_the_earlier_code_resumes_and_ends(fixture: str, shards: int) -> None:
    objects = json.loads((DATA / f"{fixture}.json").read_text())
    claim = json.loads(base64.b64decode(objects["contextual-kb/batch/current.json"]))
    with LocalWorld(corpus(), BatchConfig(min_records=1)) as world:
        world.ingest("always")
        listed = world.s3.list_objects_v2(Bucket=INTERMEDIATE, Prefix="contextual-kb/").get("Contents", [])
        for item in listed:
            world.s3.delete_object(Bucket=INTERMEDIATE, Key=item["Key"])
        for key, body in objects.items():
            world.s3.put_object(Bucket=INTERMEDIATE, Key=key, Body=base64.b64decode(body))
        contextualizer = world.contextualizer(group_size=2, shard_documents=shards)
        contextualizer.start_ingestion = lambda: ("local-job COMPLETE", world.reingest()[0])
        summary = contextualizer.run(reingest=lambda _sources: None)
        creates = [r for r in world.standin.requests if r[0] == "CreateModelInvocationJob"]
        assert summary.run == claim["run"]  # the run left, resumed: not planned again
        assert len(creates) == 1 and summary.jobs == 1
        assert summary.contexts_stored == summary.pending_before == 20 and summary.pending_after == 0
        assert summary.reingested_documents == 4 and summary.failed_records == 0
        state = json.loads(
            world.s3.get_object(Bucket=INTERMEDIATE, Key=f"contextual-kb/batch/{claim['run']}/state.json")[
                "Body"
            ].read()
        )
        assert state["phase"] == "done"
