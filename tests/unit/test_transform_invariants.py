"""The promise: every chunk the KB hands us comes back exactly once, in order, text intact, metadata kept,
nothing else added, for any documents, chunkings and batch splits."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextual_kb.runtime.context.passthrough import PassThroughStrategy
from contextual_kb.runtime.context.structural import StructuralStrategy
from contextual_kb.runtime.documents import assemble
from contextual_kb.runtime.enrichment import BODY_SEPARATOR
from contextual_kb.runtime.models import parse_event
from contextual_kb.runtime.settings import Settings
from contextual_kb.runtime.transform import Transformation, first_chunks
from tests.support import MemoryStore, event, file_entry, output_key_in

BUCKET = "intermediate"
KEY = "ckb_context"

# Finite numbers only: non-finite ones are refused by contract (tests/unit/test_models.py).
scalar = st.one_of(
    st.text(max_size=20), st.integers(), st.booleans(), st.floats(allow_nan=False, allow_infinity=False)
)
metadata = st.dictionaries(
    st.text(min_size=1, max_size=12).filter(lambda k: not k.startswith("ckb_")), scalar, max_size=4
)
text_chunk = st.builds(
    lambda body, meta: {"contentBody": body, "contentType": "TEXT", "contentMetadata": meta},
    st.text(max_size=200),
    metadata,
)
other_item = st.builds(
    lambda body, kind: {"contentBody": body, "contentType": kind, "contentMetadata": {"n": 1}},
    st.text(max_size=30),
    st.sampled_from(["IMAGE", "PDF", "binary"]),
)


@st.composite
def overlapping_document(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Chunks cut from one text with optional overlaps, the way fixed-size chunking does."""
    text = draw(st.text(min_size=1, max_size=1500))
    size = draw(st.integers(min_value=1, max_value=300))
    overlap = draw(st.integers(min_value=0, max_value=size - 1))
    starts = range(0, len(text), size - overlap)
    return [
        {"contentBody": text[s : s + size], "contentType": "TEXT", "contentMetadata": draw(metadata)}
        for s in starts
    ]


@st.composite
def input_file(draw: st.DrawFn, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
    items = draw(st.one_of(overlapping_document(), st.lists(st.one_of(text_chunk, other_item), max_size=12)))
    cuts = sorted(draw(st.lists(st.integers(0, len(items)), max_size=4)))
    bounds = [0, *cuts, len(items)]
    groups = [items[a:b] for a, b in itertools.pairwise(bounds)]
    keys = [f"job/file{index}_{n}.JSON" for n in range(1, len(groups) + 1)]
    shown = list(zip(keys, groups, strict=True))
    if draw(st.booleans()):
        shown.reverse()  # the event may list batches out of order
    objects = {key: {"fileContents": group} for key, group in shown}
    entry = file_entry(
        f"s3://src/doc{index}.{draw(st.sampled_from(['md', 'py', 'txt', 'rs']))}",
        [k for k, _ in shown],
        draw(st.one_of(st.none(), metadata)),
    )
    return entry, objects


@st.composite
def ingestion(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    count = draw(st.integers(min_value=1, max_value=4))
    files, objects = [], {}
    for index in range(count):
        entry, objs = draw(input_file(index))
        files.append(entry)
        objects.update(objs)
    return event(BUCKET, files), objects


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=ingestion(), structural=st.booleans(), prefetch=st.sampled_from([0, 10**9]))
def test_every_chunk_comes_back_exactly_once_intact(case, structural: bool, prefetch: int) -> None:
    raw_event, objects = case
    store = MemoryStore()
    for key, body in objects.items():
        store.put_json(BUCKET, key, body)
    inputs = dict(store.objects)
    settings = Settings(PREFETCH_MAX_BYTES=prefetch)
    strategy = StructuralStrategy() if structural else PassThroughStrategy()

    response, stats = Transformation(settings, strategy, store).run(parse_event(raw_event))
    out = response.dump()

    assert len(out["outputFiles"]) == len(raw_event["inputFiles"])
    written = set()
    text_total = 0
    for given_file, produced in zip(raw_event["inputFiles"], out["outputFiles"], strict=True):
        assert produced["originalFileLocation"] == given_file["originalFileLocation"]
        assert produced["fileMetadata"] == (given_file.get("fileMetadata") or {})
        in_keys = [b["key"] for b in given_file["contentBatches"]]
        out_keys = [b["key"] for b in produced["contentBatches"]]
        assert out_keys == [output_key_in("job/", k) for k in in_keys]  # same batches, same order
        for in_key, out_key in zip(in_keys, out_keys, strict=True):
            written.add(out_key)
            before = objects[in_key]["fileContents"]
            after = store.get_json(BUCKET, out_key)["fileContents"]
            assert len(after) == len(before)  # exactly once, nothing added
            for old, new in zip(before, after, strict=True):
                assert new["contentType"] == old["contentType"]
                if old["contentType"] != "TEXT":
                    assert new == old
                    continue
                text_total += 1
                if new == old:
                    continue
                context = new["contentMetadata"][KEY]
                assert new["contentBody"] == context + BODY_SEPARATOR + old["contentBody"]
                assert {k: v for k, v in new["contentMetadata"].items() if k != KEY} == old["contentMetadata"]
                assert set(new) == set(old)
    # Nothing but the outputs was written, and the inputs are untouched.
    assert set(store.writes) == written and len(store.writes) == len(written)
    assert all(store.objects[k] == v for k, v in inputs.items())
    assert stats.chunks_in == text_total
    assert stats.chunks_contextualized + stats.chunks_passed_through == text_total
    if not structural:
        assert stats.chunks_contextualized == 0


def test_retrying_the_same_event_overwrites_and_never_duplicates() -> None:
    store = MemoryStore()
    store.put_json(BUCKET, "job/a_1.JSON", {"fileContents": [{"contentBody": "x", "contentType": "TEXT"}]})
    raw = event(BUCKET, [file_entry("s3://src/a.md", ["job/a_1.JSON"])])
    transformation = Transformation(Settings(), StructuralStrategy(), store)
    first = transformation.run(parse_event(raw))[0].dump()
    snapshot = dict(store.objects)
    second = transformation.run(parse_event(json.loads(json.dumps(raw))))[0].dump()
    assert first == second
    assert store.objects == snapshot


OURS = {"ckb_section", "ckb_start", "ckb_end"}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=ingestion(), structural=st.booleans(), max_tokens=st.integers(min_value=20, max_value=80))
def test_chunking_by_structure_covers_every_document_and_keeps_every_other_item(
    case, structural: bool, max_tokens: int
) -> None:
    """CHUNKING=structure: each document's text lies in our chunks, in order, each exactly once; each
    chunk's body is its context then its text; its metadata is the KB item's plus its section and span;
    non-text items stay in their batch, in order, untouched; file metadata and batches as without it."""
    raw_event, objects = case
    store = MemoryStore()
    for key, body in objects.items():
        store.put_json(BUCKET, key, body)
    settings = Settings(CHUNKING="structure", CHUNK_MAX_TOKENS=max_tokens)
    strategy = StructuralStrategy() if structural else PassThroughStrategy()

    response, stats = Transformation(settings, strategy, store).run(parse_event(raw_event))

    made = 0
    for given_file, produced in zip(raw_event["inputFiles"], response.dump()["outputFiles"], strict=True):
        assert produced["fileMetadata"] == (given_file.get("fileMetadata") or {})
        in_keys = [b["key"] for b in given_file["contentBatches"]]
        assert [b["key"] for b in produced["contentBatches"]] == [output_key_in("job/", k) for k in in_keys]
        ordered = sorted(in_keys, key=lambda k: int(k.rsplit("_", 1)[1].split(".")[0]))
        texts = [
            i["contentBody"]
            for k in ordered
            for i in objects[k]["fileContents"]
            if i["contentType"] == "TEXT"
        ]
        document = assemble(texts).text
        position = 0
        for key in ordered:
            before = objects[key]["fileContents"]
            after = store.get_json(BUCKET, output_key_in("job/", key))["fileContents"]
            assert [i for i in after if i["contentType"] != "TEXT"] == [
                i for i in before if i["contentType"] != "TEXT"
            ]
            kb_metadata = [i["contentMetadata"] for i in before if i["contentType"] == "TEXT"]
            for item in (i for i in after if i["contentType"] == "TEXT"):
                meta = item["contentMetadata"]
                made += 1
                if not document:  # nothing to chunk: the KB's empty items come back as they were
                    assert meta in kb_metadata
                    continue
                start, end = meta["ckb_start"], meta["ckb_end"]
                assert start == position and end > start  # in order, no gap, no repeat
                position = end
                chunk = document[start:end]
                context = meta.get(KEY)
                assert item["contentBody"] == (context + BODY_SEPARATOR + chunk if context else chunk)
                assert {k: v for k, v in meta.items() if k not in OURS | {KEY}} in kb_metadata
        assert position == len(document)
    assert stats.chunks_out == made
    assert stats.chunks_contextualized + stats.chunks_passed_through == stats.chunks_out


def test_chunks_start_in_the_item_they_replace() -> None:
    # Items start at 0, 10 and 10 (an empty one), 25; chunks at 0, 4, 12, 30.
    assert first_chunks([0, 10, 10, 25], [0, 4, 12, 30]) == (0, 2, 2, 3, 4)
    assert first_chunks([0], []) == (0, 0)


def test_a_document_chunked_into_more_than_one_part_is_written_in_parts(monkeypatch) -> None:
    """A whole document chunked here can hold tens of megabytes: its output is written in parts (each about
    OUTPUT_PART_MAX_BYTES), all named in the response, in order, under keys that do not collide."""
    from contextual_kb.runtime import transform

    monkeypatch.setattr(transform, "OUTPUT_PART_MAX_BYTES", 64 * 1024)
    text = "".join(
        f"## Part {n}\n\n" + "Words of the part, one sentence after another. " * 40 + "\n\n"
        for n in range(300)
    )
    store = MemoryStore()
    store.put_json(
        BUCKET, "job/doc.md_1.JSON", {"fileContents": [{"contentBody": text, "contentType": "TEXT"}]}
    )
    raw = event(BUCKET, [file_entry("s3://src/doc.md", ["job/doc.md_1.JSON"], {"team": "a"})])
    settings = Settings(CHUNKING="structure")
    response, stats = Transformation(settings, PassThroughStrategy(), store).run(parse_event(raw))
    keys = [ref.key for ref in response.output_files[0].content_batches]
    assert len(keys) > 5 and keys[0] == "job/contextual-kb/output/doc.md_1.JSON"
    assert re.fullmatch(r"job/contextual-kb/output/doc\.md_1~part2-[0-9a-f]{8}\.JSON", keys[1])
    parts = [store.get_json(BUCKET, key)["fileContents"] for key in keys]
    assert all(len(json.dumps(part)) < 3 * 64 * 1024 for part in parts)
    bodies = [item["contentBody"] for part in parts for item in part]
    assert "".join(bodies) == text and stats.chunks_out == len(bodies) and stats.batches_out == len(keys)


def test_parts_are_sized_in_bytes_not_characters(monkeypatch) -> None:
    """Three bytes a character (CJK text): a part stays within OUTPUT_PART_MAX_BYTES of JSON, not three
    times that."""
    from contextual_kb.runtime import transform

    monkeypatch.setattr(transform, "OUTPUT_PART_MAX_BYTES", 64 * 1024)
    chunks = [
        {"contentBody": f"第{n}部。" + "本部分的文字，一句接一句。" * 400, "contentType": "TEXT"}
        for n in range(40)
    ]
    store = MemoryStore()
    store.put_json(BUCKET, "job/doc.md_1.JSON", {"fileContents": chunks})
    raw = event(BUCKET, [file_entry("s3://src/doc.md", ["job/doc.md_1.JSON"])])
    response, _ = Transformation(Settings(), PassThroughStrategy(), store).run(parse_event(raw))
    keys = [ref.key for ref in response.output_files[0].content_batches]
    sizes = [len(store.objects[f"{BUCKET}/{key}"]) for key in keys]
    assert len(keys) > 5 and max(sizes) <= 64 * 1024, sizes
    parts = [store.get_json(BUCKET, key)["fileContents"] for key in keys]
    assert [item["contentBody"] for part in parts for item in part] == [c["contentBody"] for c in chunks]
