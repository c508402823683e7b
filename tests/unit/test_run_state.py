"""The run's state, typed (deferred/state.py): every state today's code reads was written by an earlier one
(tests/integration/data: what ckb contextualize left at 436dcc0, before the state had a type) and comes
back as it was, plus its version; a key this version does not know is kept; a body that is no state is
refused."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from contextual_kb.deferred.state import STATE_VERSION, RunState

DATA = Path(__file__).resolve().parents[1] / "integration" / "data"


def earlier_states() -> list[tuple[str, bytes]]:
    found = []
    for fixture in sorted(DATA.glob("run_state_v0_*.json")):
        for key, body in json.loads(fixture.read_text()).items():
            if key.endswith("/state.json"):
                found.append((key, base64.b64decode(body)))
    return found


def test_the_fixtures_hold_a_run_in_one_piece_a_sharded_run_and_its_shards() -> None:
    keys = [key for key, _ in earlier_states()]
    assert len(keys) == 4 and sum("/shards/" in key for key in keys) == 2


@pytest.mark.parametrize(("key", "body"), earlier_states())
def test_a_state_written_before_the_type_reads_and_writes_back_as_it_was(key: str, body: bytes) -> None:
    state = RunState.from_json(body)
    assert state.version == 0 and state.extra == {}
    written = json.loads(state.to_json())
    assert written.pop("version") == STATE_VERSION
    assert written == json.loads(body)
    assert RunState.from_json(state.to_json()).version == STATE_VERSION


def test_a_key_this_version_does_not_know_is_kept_and_an_optional_one_is_written_once_set() -> None:
    state = RunState.from_json(json.dumps({"run": "r", "phase": "planned", "records": {}, "documents": {},
                                           "later": {"x": 1}}))  # fmt: skip
    assert state.extra == {"later": {"x": 1}} and "still" not in json.loads(state.to_json())
    state.still = {"k": 2}
    written = json.loads(state.to_json())
    assert written["later"] == {"x": 1} and written["still"] == {"k": 2}


NOT_STATES = [
    b"[]",
    b'{"run": "r"}',
    b"not json",
    b'{"run": 1, "phase": "p", "records": {}, "documents": {}}',
]


@pytest.mark.parametrize("body", NOT_STATES)
def test_a_body_that_is_no_state_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError):
        RunState.from_json(body)
