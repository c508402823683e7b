"""The prefetch: validated batches are kept for later within PREFETCH_MAX_BYTES, the rest read again pinned
to the version validated. What the memory test (tests/load/test_load.py) leaves to this bound."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from contextual_kb.runtime.context.passthrough import PassThroughStrategy
from contextual_kb.runtime.models import parse_event
from contextual_kb.runtime.settings import Settings
from contextual_kb.runtime.storage import StoredObject
from contextual_kb.runtime.transform import Transformation
from tests.support import MemoryStore, event, file_entry, text_item

BUCKET = "intermediate"


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads: Counter[str] = Counter()
        self.pinned: list[str] = []

    def read(self, bucket: str, key: str, *, if_match: str | None = None) -> StoredObject:
        self.reads[key] += 1
        if if_match is not None:
            self.pinned.append(key)
        return super().read(bucket, key, if_match=if_match)


def staged(files: int) -> tuple[CountingStore, dict[str, Any], int]:
    """``files`` files of one batch of about 1 KB each; the store, the event, one batch's size in bytes."""
    store = CountingStore()
    entries = []
    for index in range(files):
        key = f"job/file{index}_1.JSON"
        store.put_json(BUCKET, key, {"fileContents": [text_item(f"{index} " + "x" * 1000)]})
        entries.append(file_entry(f"s3://src/doc{index}.md", [key]))
    size = len(store.objects[f"{BUCKET}/job/file0_1.JSON"])
    return store, event(BUCKET, entries), size


@pytest.mark.parametrize("kept", [0, 1, 3, 8])
def test_batches_beyond_the_budget_are_read_again_pinned_to_the_version_validated(kept: int) -> None:
    store, raw, size = staged(8)
    budget = kept * size + size // 2  # room for ``kept`` batches, not one more
    Transformation(Settings(PREFETCH_MAX_BYTES=budget), PassThroughStrategy(), store).run(parse_event(raw))
    read_twice = sorted(key for key, count in store.reads.items() if count == 2)
    assert len(store.reads) == 8 and set(store.reads.values()) <= {1, 2}
    assert len(read_twice) == 8 - kept  # the first ``kept`` are held, every other one read again
    assert sorted(store.pinned) == read_twice
