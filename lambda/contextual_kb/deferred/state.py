"""A run's state: one typed object, read from and written to S3 here alone.

The run's (``<batch prefix><run>/state.json``) and, for a sharded run, each shard's
(``<batch prefix><run>/shards/<n>/state.json``: the same shape, its records and documents, with ``shard``
and its store's checkpoints) are one ``RunState``. Its JSON is what every earlier version wrote, plus a
``version``: a state written before the version was (read as version 0, the same fields) resumes as it
was, and a key this version does not know is kept as it was read (``extra``), so a state never loses what
a later version wrote into it. Optional keys are written only once set, as before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

# 1: the version field itself; the fields are those of the unversioned states (version 0).
STATE_VERSION = 1
STATE_FILE = "state.json"
_REQUIRED = ("run", "phase", "records", "documents")


@dataclass
class RunState:
    run: str
    phase: str  # see contextualize.py (a run in one piece) and shards.py (a sharded run, a shard)
    # record id -> {document, unit, chunks, model}: a sharded run's are its shards'
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    # pending record key -> what the run knows of it (source, chunks, with_text, spans, memory, awaiting)
    documents: dict[str, dict[str, Any]] = field(default_factory=dict)
    touched: dict[str, str] = field(default_factory=dict)  # pending record key -> source, given contexts
    jobs: list[dict[str, Any]] = field(default_factory=list)
    on_demand: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)  # contextualize.Summary's fields
    # Absent until set (None): a sharded run's, a shard's, or a phase's checkpoints.
    sharded: bool | None = None
    shards: int | None = None
    listed: bool | None = None
    quote_usd: float | None = None
    still: dict[str, int] | None = None  # pending record key -> chunks still wanted, once settled
    retry: dict[str, Any] | None = None  # the failed records asked again on demand
    stale: list[str] | None = None  # record ids whose document was recorded again meanwhile
    shard: int | None = None  # a shard's number
    stored_pieces: list[str] | None = None  # a shard's input pieces stored
    failed: list[str] | None = None  # a shard's records failed so far
    version: int = STATE_VERSION
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept

    # --- JSON: the one place a state is read or written ---
    @classmethod
    def from_json(cls, body: bytes | str) -> RunState:
        """A state from its JSON; ValueError when it is not one."""
        raw = json.loads(body)
        if not isinstance(raw, dict) or not set(_REQUIRED) <= set(raw):
            raise ValueError("not a run's state")
        known = {f.name for f in fields(cls)} - {"extra", "version"}
        state = cls(
            **{k: v for k, v in raw.items() if k in known},
            version=int(raw.get("version", 0)),
            extra={k: v for k, v in raw.items() if k not in known and k != "version"},
        )
        if not isinstance(state.run, str) or not isinstance(state.phase, str):
            raise ValueError("not a run's state")
        return state

    def to_json(self) -> bytes:
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in {"extra", "version"}:
                continue
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = value
        out.update(self.extra)
        out["version"] = STATE_VERSION
        return json.dumps(out).encode("utf-8")

    # --- the keys, as the code read them before the state was typed (``state["phase"]``) ---
    def _known(self, key: str) -> bool:
        return key in _FIELDS

    def __getitem__(self, key: str) -> Any:
        if self._known(key):
            value = getattr(self, key)
            if value is None:
                raise KeyError(key)
            return value
        return self.extra[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if self._known(key):
            setattr(self, key, value)
        else:
            self.extra[key] = value

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str) and self._known(key):
            return getattr(self, key) is not None
        return key in self.extra

    def get(self, key: str, default: Any = None) -> Any:
        if key in self:
            return self[key]
        return default

    def setdefault(self, key: str, default: Any) -> Any:
        if key not in self:
            self[key] = default
        return self[key]


_FIELDS = {f.name for f in fields(RunState)} - {"extra", "version"}


def state_key(batch_prefix: str, run: str) -> str:
    """Where run ``run``'s state is (a shard's is in its own folder: ``shards.shard_folder``)."""
    return f"{batch_prefix}{run}/{STATE_FILE}"
