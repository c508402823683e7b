"""The transformation SDK (runtime.sdk) through the real handler path, against moto's S3: the engine's
promises hold whatever a user's step does, and a step that breaks a rule fails the call, naming itself,
with nothing written left behind (docs/SDK.md)."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from typing import Any

import pytest

from contextual_kb.local.lambda_context import LocalLambdaContext
from contextual_kb.runtime import handler
from contextual_kb.runtime.errors import ContractError
from contextual_kb.runtime.sdk import Chunk, Document, Dropped, Pipeline, StepError, transformation
from tests.conftest import output_lines
from tests.integration.test_handler import GOOD_SAMPLES, read, stage
from tests.support import event, file_entry, outputs_in, text_item


def outputs(s3: Any, raw: dict[str, Any], response: dict[str, Any]) -> list[list[list[dict[str, Any]]]]:
    """For each output file, its batches' items."""
    return [
        [read(s3, raw["bucketName"], ref["key"])["fileContents"] for ref in produced["contentBatches"]]
        for produced in response["outputFiles"]
    ]


def identity(document: Document) -> list[Chunk]:
    return list(document.chunks)


@pytest.mark.parametrize("name", GOOD_SAMPLES)
@pytest.mark.parametrize("chunking", ["kb", "structure"])
def test_a_step_that_changes_nothing_gives_exactly_the_functions_own_output(
    s3: Any, monkeypatch: pytest.MonkeyPatch, name: str, chunking: str
) -> None:
    """One implementation: the SDK's handler is the engine's; with a step that returns every chunk as it
    came, the response and every output object are the repository's handler's, byte for byte."""
    monkeypatch.setenv("CHUNKING", chunking)
    raw = stage(s3, name)
    ours = handler.lambda_handler(raw, LocalLambdaContext())
    expected = outputs(s3, raw, ours)
    for step_handler in (transformation(identity), transformation(after_contexts=True)(identity)):
        theirs = step_handler(raw, LocalLambdaContext())
        assert theirs == ours
        assert outputs(s3, raw, theirs) == expected


def test_the_decorator_adds_metadata_to_every_chunk_of_every_batch_of_a_whole_document(s3: Any) -> None:
    seen: list[tuple[str, int, str]] = []

    @transformation
    def tag(document: Document) -> list[Chunk]:
        seen.append((document.name, len(document.chunks), document.folder))
        return [c.with_metadata(folder=document.folder, position=i) for i, c in enumerate(document.chunks)]

    raw = stage(s3, "multi-batch")  # one file, its chunks in several batch objects
    response = tag(raw, LocalLambdaContext())
    batches = outputs(s3, raw, response)[0]
    given = [
        read(s3, raw["bucketName"], ref["key"])["fileContents"]
        for ref in raw["inputFiles"][0]["contentBatches"]
    ]
    assert seen == [
        ("northwind-msa.txt", sum(len(b) for b in given), "contracts")
    ]  # the whole document, once
    positions = []
    for before, after in zip(given, batches, strict=True):
        assert len(before) == len(after)
        for old, new in zip(before, after, strict=True):
            assert new["contentBody"].endswith("\n\n" + old["contentBody"])  # text intact, context on it
            assert {k: new["contentMetadata"][k] for k in old["contentMetadata"]} == old["contentMetadata"]
            assert new["contentMetadata"]["folder"] == "contracts"
            assert new["contentMetadata"]["ckb_context"]
            positions.append(new["contentMetadata"]["position"])
    assert positions == sorted(positions)  # batches in document order (_1, _2, ... by number)


def staged(s3: Any, bodies: list[list[str]], uri: str = "s3://src/docs/a.md") -> dict[str, Any]:
    """One document in several batch objects."""
    s3.create_bucket(Bucket="inter")
    keys = []
    for number, texts in enumerate(bodies, 1):
        key = f"job/docs_a.md_{number}.JSON"
        body = {"fileContents": [text_item(t, {"n": f"{number}.{i}"}) for i, t in enumerate(texts)]}
        s3.put_object(Bucket="inter", Key=key, Body=json.dumps(body))
        keys.append(key)
    return event("inter", [file_entry(uri, keys, {"team": "docs"})])


BODIES = [
    ["Alpha one. Contact ops@example.com now.", "Beta two is boilerplate."],
    ["Gamma three.", "Delta four."],
]


def test_drops_are_explicit_counted_by_reason_and_logged(
    s3: Any, captured: pytest.CaptureFixture[str]
) -> None:
    @transformation
    def no_boilerplate(document: Document) -> list[Chunk | Dropped]:
        return [c.drop("boilerplate") if "boilerplate" in c.text else c for c in document.chunks]

    raw = staged(s3, BODIES)
    captured.readouterr()
    response = no_boilerplate(raw, LocalLambdaContext())
    batches = outputs(s3, raw, response)[0]
    assert [[i["contentMetadata"]["n"] for i in b] for b in batches] == [["1.0"], ["2.0", "2.1"]]
    lines = output_lines(captured)
    (emf,) = [line for line in lines if "_aws" in line and "ChunksIn" in line]
    assert emf["ChunksIn"] == [4.0] and emf["ChunksOut"] == [3.0] and emf["ChunksDropped"] == [1.0]
    (summary,) = [line for line in lines if line.get("message") == "transformation complete"]
    assert summary["dropped_by_reason"] == {"boilerplate": 1}
    assert any(
        line.get("dropped") == {"boilerplate": 1} and line["file"] == "s3://src/docs/a.md" for line in lines
    )


def left_at_own_keys(s3: Any, raw: dict[str, Any]) -> bool:
    """What a failed call wrote lies only under its own output directory (the one its input keys share), at
    the keys a retry of the same event overwrites: nothing is deleted (issue 40), nothing strays."""
    from contextual_kb.runtime.output_keys import shared_directory
    from tests.support import OUTPUT_PREFIX

    inputs = [batch["key"] for file in raw["inputFiles"] for batch in file["contentBatches"]]
    own = shared_directory(inputs) + OUTPUT_PREFIX
    stray = [key for key in outputs_in(s3, raw["bucketName"]) if not key.startswith(own)]
    assert not stray, (own, stray)
    return True


def failing(
    s3: Any, step_handler: Any, raw: dict[str, Any], match: str, context: LocalLambdaContext | None = None
) -> None:
    with pytest.raises(StepError, match=match):
        step_handler(raw, context or LocalLambdaContext())
    # A failed call deletes nothing (a concurrent call of the same event may name those keys: issue 40):
    # what it wrote lies at the call's own output keys, which a retry overwrites.
    assert left_at_own_keys(s3, raw)


@pytest.mark.parametrize(
    ("step", "match"),
    [
        (lambda d: list(d.chunks)[:-1], r"1 of the document's chunks neither returned nor dropped .*chunk 3"),
        (lambda d: [*d.chunks, d.chunks[0]], "returned the same chunk twice"),
        (lambda d: [c.text for c in d.chunks], "returned a str, not a Chunk or Dropped"),
        (lambda d: None, "returned None"),
        (lambda d: [Chunk("a new text") for _ in d.chunks], "neither returned nor dropped"),
        (lambda d: [c.drop("x") for c in d.chunks][:1] + list(d.chunks)[1:3], "neither returned nor dropped"),
    ],
    ids=["one-fewer", "twice", "strings", "none", "fresh-chunks-lose-the-kb-ones", "partial-drop"],
)
def test_a_step_that_loses_or_duplicates_a_chunk_fails_the_call(s3: Any, step: Any, match: str) -> None:
    raw = staged(s3, BODIES)
    failing(s3, transformation(step), raw, match)
    failing(s3, transformation(after_contexts=True)(step), raw, match)


def test_a_step_that_returns_another_documents_chunk_fails_the_call(s3: Any) -> None:
    """A step that keeps state between documents cannot write one document's text into another."""
    first: list[Chunk] = []

    @transformation
    def leaky(document: Document) -> list[Chunk]:
        first.extend(first or document.chunks)
        return [*first[: len(document.chunks)]] if document.path == "docs/b.md" else list(document.chunks)

    raw = staged(s3, BODIES)
    s3.put_object(Bucket="inter", Key="job/b_1.JSON", Body=json.dumps({"fileContents": [text_item("b")]}))
    raw["inputFiles"].append(file_entry("s3://src/docs/b.md", ["job/b_1.JSON"]))
    failing(s3, leaky, raw, "on s3://src/docs/b.md: returned a chunk of another document")


def test_a_step_may_read_the_knowledge_bases_keys_but_not_set_them() -> None:
    with pytest.raises(ValueError, match="is the Knowledge Base's"):
        Chunk("x").with_metadata({"x-amz-bedrock-kb-source-uri": "s3://elsewhere"})


def test_a_step_that_raises_fails_the_call_naming_it_and_the_file(
    s3: Any, captured: pytest.CaptureFixture[str]
) -> None:
    def broken(document: Document) -> list[Chunk]:
        if document.path == "docs/b.md":
            raise KeyError("front matter")
        return list(document.chunks)

    raw = staged(s3, BODIES)
    s3.put_object(Bucket="inter", Key="job/b_1.JSON", Body=json.dumps({"fileContents": [text_item("b")]}))
    raw["inputFiles"].append(file_entry("s3://src/docs/b.md", ["job/b_1.JSON"]))
    # The first file's outputs are written before the second file's step raises: they stay at their keys.
    failing(s3, transformation(broken), raw, r"step 'test_.*broken' on s3://src/docs/b.md: raised KeyError")
    errors = [line for line in output_lines(captured) if line.get("level") == "ERROR"]
    assert errors and errors[0]["ingestion_job_id"] == "JOB1"


def test_chunks_are_immutable_so_a_step_cannot_change_text_or_metadata_behind_the_engine(s3: Any) -> None:
    def assign(document: Document) -> list[Chunk]:
        document.chunks[0].text = "changed"  # type: ignore[misc]
        return list(document.chunks)

    def mutate(document: Document) -> list[Chunk]:
        document.chunks[0].metadata["n"] = "changed"  # type: ignore[index]
        return list(document.chunks)

    raw = staged(s3, BODIES)
    failing(s3, transformation(assign), raw, "raised FrozenInstanceError")
    failing(s3, transformation(mutate), raw, "raised TypeError")
    kept: dict[str, Any] = {"k": ["v"]}
    chunk = Chunk("x").with_metadata(kept)
    kept["k"].append("w")  # the step's own dict, changed afterwards: the chunk kept a copy
    assert chunk.metadata == {"k": ["v"]}
    with pytest.raises(TypeError, match="must be JSON"):
        Chunk("x").with_metadata(score=float("nan"))
    with pytest.raises(TypeError, match="must be JSON"):
        Chunk("x").with_metadata(when=time)
    for blank in (
        lambda: Chunk(" \n"),
        lambda: Chunk("x").with_text(""),
        lambda: Chunk("x").split(["x", " "]),
    ):
        with pytest.raises(ValueError, match="must not be blank: to leave a chunk out, drop it"):
            blank()
    with pytest.raises(ValueError, match="needs a reason"):
        Chunk("x").drop(" ")
    with pytest.raises(ValueError, match="a label"):
        Chunk("x").drop("why\n" * 30)


def test_rewritten_split_and_merged_chunks_are_written_in_their_places_and_counted(
    s3: Any, captured: pytest.CaptureFixture[str]
) -> None:
    @transformation
    def shape(document: Document) -> list[Chunk]:
        a, b, c, d = document.chunks
        return [
            *a.split(["Alpha one.", " Contact ops@example.com now."]),
            b.merged_with(c),
            d.with_text("DELTA"),
        ]

    raw = staged(s3, BODIES)
    captured.readouterr()
    response = shape(raw, LocalLambdaContext())
    first, second = outputs(s3, raw, response)[0]
    bodies = [[i["contentBody"].rpartition("\n\n")[2] for i in batch] for batch in (first, second)]
    # the split in place of a; b and c merged in b's place (c's batch loses it); d rewritten
    assert bodies == [
        ["Alpha one.", " Contact ops@example.com now.", "Beta two is boilerplate.\nGamma three."],
        ["DELTA"],
    ]
    assert [i["contentMetadata"]["n"] for i in first] == ["1.0", "1.0", "1.1"]
    (emf,) = [line for line in output_lines(captured) if "_aws" in line and "ChunksIn" in line]
    assert emf["ChunksRewritten"] == [1.0]  # the rewrite: the split and the merge keep their texts


def test_what_a_step_returns_is_what_the_context_step_is_shown(s3: Any) -> None:
    contexts: list[str | None] = []

    @transformation
    def shout(document: Document) -> list[Chunk]:
        return [c.with_text(c.text.upper()) for c in document.chunks]

    def look(document: Document) -> list[Chunk]:  # after the context step
        contexts.extend(c.context for c in document.chunks)
        assert "ALPHA ONE" in document.text
        return list(document.chunks)

    raw = staged(s3, BODIES)
    response = shout(raw, LocalLambdaContext())
    items = [i for batch in outputs(s3, raw, response)[0] for i in batch]
    assert [i["contentBody"].rpartition("\n\n")[2] for i in items] == [t.upper() for b in BODIES for t in b]
    # The structural context quotes the document's opening: the shouted one, not the original.
    assert all(i["contentMetadata"]["ckb_context"].startswith("Document docs/a.md: ALPHA ONE") for i in items)
    Pipeline(before=[shout.step], after=[look]).handler()(raw, LocalLambdaContext())
    assert len(contexts) == 4 and all(contexts)


def test_metadata_a_step_sets_is_kept_within_the_stores_limit_and_what_does_not_fit_is_counted(
    s3: Any, monkeypatch: pytest.MonkeyPatch, captured: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VECTOR_STORE", "s3vectors")  # 1 KB and 35 keys per vector, all custom metadata

    @transformation
    def heavy(document: Document) -> list[Chunk]:
        return [
            c.with_metadata(small="kept", huge="x" * 2000, team="overrides the file's", n="y" * 2000)
            for c in document.chunks
        ]

    raw = staged(s3, BODIES)
    captured.readouterr()
    response = heavy(raw, LocalLambdaContext())
    for item in (i for batch in outputs(s3, raw, response)[0] for i in batch):
        meta = item["contentMetadata"]
        assert meta["small"] == "kept" and meta["team"] == "overrides the file's" and "huge" not in meta
        assert meta["n"] in {"1.0", "1.1", "2.0", "2.1"}  # the KB's value kept: its new one did not fit
        whole = {**raw["inputFiles"][0]["fileMetadata"], **meta}
        assert len(json.dumps(whole, ensure_ascii=False, separators=(",", ":")).encode()) <= 1024
    lines = output_lines(captured)
    (emf,) = [line for line in lines if "_aws" in line and "ChunksIn" in line]
    assert emf["StepMetadataLeftOut"] == [8.0]
    (warning,) = [line for line in lines if line.get("keys_left_out")]
    assert warning["keys_left_out"] == {"huge": 4, "n": 4} and warning["level"] == "WARNING"


def test_a_chunk_a_step_makes_keeps_the_metadata_rules_of_with_metadata(
    s3: Any, monkeypatch: pytest.MonkeyPatch, captured: pytest.CaptureFixture[str]
) -> None:
    """``Chunk(text, metadata)`` is no way around with_metadata: its keys are fitted to the store's limit
    (what does not fit left out and counted), none of the Knowledge Base's own, string keys only."""
    monkeypatch.setenv("VECTOR_STORE", "s3vectors")
    with pytest.raises(ValueError, match="is the Knowledge Base's"):
        Chunk("forged", {"x-amz-bedrock-kb-source-uri": "s3://elsewhere/doc.md"})
    with pytest.raises(TypeError, match="string keys"):
        Chunk("x", {1: "x"})
    with pytest.raises(TypeError, match=r"^metadata key 1: keys are strings$"):
        Chunk("x").with_metadata({1: "x"})

    @transformation
    def adds(document: Document) -> list[Chunk]:
        made = Chunk("A summary of the document.", {f"k{i:02}": "v" * 50 for i in range(60)})
        return [*document.chunks, made]

    raw = staged(s3, BODIES)
    captured.readouterr()
    response = adds(raw, LocalLambdaContext())
    items = [i for batch in outputs(s3, raw, response)[0] for i in batch]
    (made,) = [i for i in items if "A summary of the document." in i["contentBody"]]
    whole = {**raw["inputFiles"][0]["fileMetadata"], **made["contentMetadata"]}
    assert len(json.dumps(whole, ensure_ascii=False, separators=(",", ":")).encode()) <= 1024
    assert len(whole) <= 35
    kept = len(made["contentMetadata"])
    assert kept > 0 and list(made["contentMetadata"]) == [
        f"k{i:02}" for i in range(kept)
    ]  # first set, first in
    (emf,) = [line for line in output_lines(captured) if "_aws" in line and "ChunksIn" in line]
    assert emf["StepMetadataLeftOut"] == [60.0 - kept]


def test_a_step_is_never_skipped_when_time_runs_out_the_call_fails_instead(s3: Any) -> None:
    @transformation
    def slow(document: Document) -> list[Chunk]:
        time.sleep(2.5)
        return list(document.chunks)

    raw = staged(s3, BODIES)
    s3.put_object(Bucket="inter", Key="job/b_1.JSON", Body=json.dumps({"fileContents": [text_item("b")]}))
    raw["inputFiles"].append(file_entry("s3://src/docs/b.md", ["job/b_1.JSON"]))
    # DEADLINE_RESERVE_SECONDS=10 is kept back: 12 s left gives 2 s (less the writes' estimate), spent by
    # the first document's step: the second document's is not skipped, the call fails.
    context = LocalLambdaContext(timeout_seconds=10)
    context._started += 2.0
    failing(s3, slow, raw, r"on s3://src/docs/b.md: no time left to run it", context)


def test_the_steps_time_is_taken_off_the_models() -> None:
    """Per character of what is left: the steps before the model on the files not loaded yet, the steps
    after it on the files not written yet."""
    from contextual_kb.runtime.budget import WorkLeft

    work = WorkLeft(parallelism=1)
    work.expect(chars=1_000_000)
    work.expect(chars=1_000_000)
    base = work.seconds()
    work.note_steps(1000, 0.5, before=True)  # 0.5 ms a character: 1,000 s for the 2 MB not loaded
    assert work.seconds() == pytest.approx(base + 1000)
    work.file_loaded(1_000_000)  # its steps before the model have run
    assert work.seconds() == pytest.approx(base + 500)
    work.note_steps(1000, 0.1, before=False)  # 0.1 ms a character on the 2 MB not written
    assert work.seconds() == pytest.approx(base + 500 + 200)


def test_a_slow_step_after_the_model_is_counted_as_declared_until_measured() -> None:
    from contextual_kb.runtime.budget import WorkLeft

    work = WorkLeft(parallelism=1)
    work.expect(chars=1000, files=8)
    base = work.seconds()
    work.after_steps_per_file = 0.4  # Pipeline(..., seconds_per_document=0.4)
    assert work.seconds() == pytest.approx(base + 8 * 0.4)
    work.file_done(100)  # one file written: 7 left
    assert work.seconds() == pytest.approx(base - 100 / 1_000_000 + 7 * 0.4)
    work.note_steps(100, 0.1, before=False)  # measured: 1 ms a character on the 900 left
    assert work.seconds() == pytest.approx(base - 100 / 1_000_000 + 0.9)
    with pytest.raises(ValueError, match="seconds a document"):
        Pipeline(after=[identity], seconds_per_document=-1)


@pytest.mark.parametrize("name", ["malformed-event", "malformed-batch"])
def test_malformed_input_fails_as_it_does_for_the_functions_own_handler(s3: Any, name: str) -> None:
    raw = stage(s3, name)
    with pytest.raises(ContractError):
        transformation(identity)(raw, LocalLambdaContext())
    assert outputs_in(s3, raw["bucketName"]) == []


def test_a_document_whose_every_chunk_is_dropped_is_written_back_empty(s3: Any) -> None:
    @transformation
    def nothing(document: Document) -> list[Dropped]:
        return [c.drop("empty") for c in document.chunks]

    raw = staged(s3, BODIES)
    response = nothing(raw, LocalLambdaContext())
    assert outputs(s3, raw, response) == [[[], []]]
    assert response["outputFiles"][0]["fileMetadata"] == {"team": "docs"}


def test_a_pipeline_runs_its_steps_in_order_around_the_context_step(s3: Any) -> None:
    order: list[str] = []

    def step(name: str) -> Any:
        def run(document: Document) -> list[Chunk]:
            order.append(f"{name}:{all(c.context for c in document.chunks)}")
            return [c.with_metadata({name: True}) for c in document.chunks]

        return run

    handler_ = Pipeline(before=[step("b1"), step("b2")], after=[step("a1")]).handler()
    raw = staged(s3, BODIES)
    response = handler_(raw, LocalLambdaContext())
    assert order == ["b1:False", "b2:False", "a1:True"]
    item = outputs(s3, raw, response)[0][0][0]
    assert item["contentMetadata"]["b1"] and item["contentMetadata"]["a1"]
    with pytest.raises(ValueError, match="without steps"):
        Pipeline()
    with pytest.raises(TypeError, match="a step must be a function"):
        Pipeline(before=["not callable"])  # type: ignore[list-item]


def test_the_public_names_are_the_documented_ones() -> None:
    from contextual_kb.runtime import sdk

    assert sorted(sdk.__all__) == [
        "Chunk",
        "Document",
        "Dropped",
        "LambdaHandler",
        "Pipeline",
        "Step",
        "StepError",
        "transformation",
    ]
    assert dataclasses.is_dataclass(Chunk) and Chunk.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_the_code_docs_sdk_shows_runs_as_written(s3: Any) -> None:
    """docs/SDK.md's decorator, worked example and test of a step alone, run as the page shows them."""
    from tests.conftest import ROOT

    page = (ROOT / "docs" / "SDK.md").read_text()
    # The deploying snippet (a construct in a CDK app) is synthesized by the users' apps, not run here.
    simple, _pipeline, worked, _deploying, alone = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    namespace: dict[str, Any] = {}
    exec(simple, namespace)
    raw = staged(s3, BODIES)
    response = namespace["handler"](raw, LocalLambdaContext())
    assert outputs(s3, raw, response)[0][0][0]["contentMetadata"]["folder"] == "docs"
    namespace = {}
    exec(worked, namespace)
    exec(alone, namespace)  # its assert holds
    response = namespace["handler"](raw, LocalLambdaContext())
    first = outputs(s3, raw, response)[0][0][0]
    assert first["contentBody"].endswith("Alpha one. Contact [email] now.")
    assert first["contentMetadata"]["emails_redacted"] == 1


def test_unknown_fields_and_an_absent_metadata_travel_through_a_step(
    s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the engine promises without steps (fields of an item it does not know travel untouched, nothing
    invented) holds with them: a chunk written by a step is a copy of its item."""
    monkeypatch.setenv("CONTEXT_STRATEGY", "none")
    s3.create_bucket(Bucket="inter")
    items = [
        {"contentBody": "one", "contentType": "text", "x-future": {"a": 1}},
        {"contentBody": "two", "contentType": "TEXT", "contentMetadata": {"k": 1}, "x-future": 2},
    ]
    s3.put_object(Bucket="inter", Key="j/a_1.JSON", Body=json.dumps({"fileContents": items, "x-batch": True}))
    raw = event("inter", [file_entry("s3://src/a.md", ["j/a_1.JSON"])])
    written = outputs(s3, raw, transformation(identity)(raw, LocalLambdaContext()))[0][0]
    assert written == items
    tagged = outputs(
        s3, raw, transformation(lambda d: [c.with_metadata(t=1) for c in d.chunks])(raw, LocalLambdaContext())
    )
    assert tagged[0][0] == [
        {**items[0], "contentMetadata": {"t": 1}},
        {**items[1], "contentMetadata": {"k": 1, "t": 1}},
    ]
    key = transformation(identity)(raw, LocalLambdaContext())["outputFiles"][0]["contentBatches"][0]["key"]
    assert read(s3, "inter", key)["x-batch"] is True


@pytest.mark.long
@pytest.mark.parametrize("declared", [0.0, 0.4])
def test_a_slow_step_after_a_slow_model_in_a_short_lambda(
    s3: Any, standin: Any, monkeypatch: pytest.MonkeyPatch, declared: float
) -> None:
    """docs/RELIABILITY.md, "The SDK's steps, attacked": a step after the model sleeping 0.4 s a document,
    8 documents, the model 1.5 s a call, 2 at once, 6 s after the reserve. Undeclared, the step is measured
    too late and the call fails, leaving nothing; declared, the model stops early and every chunk is back
    (structural contexts) before the Lambda's end."""
    from tests.integration.test_claude import paragraphs
    from tests.integration.test_claude import stage as stage_documents

    standin.configure(latency_ms=1500.0)
    monkeypatch.setenv("MAX_CONCURRENCY", "2")
    monkeypatch.setenv("CONTEXT_MEMORY_PREFIX", "")
    raw, _ = stage_documents(s3, {f"doc{i}.md": paragraphs(f"d{i}", 4) for i in range(8)})

    def slow(document: Document) -> list[Chunk]:
        time.sleep(0.4)
        return list(document.chunks)

    seen: list[str] = []

    def slow_and_seen(document: Document) -> list[Chunk]:
        seen.append(document.path)
        return slow(document)

    run = Pipeline(after=[slow_and_seen], seconds_per_document=declared).handler()
    started = time.monotonic()
    if not declared:
        # Measured too late, the call may run out of time (how far the model got first is the machine's
        # timing): then it fails rather than skip a step; if it finishes, every document went through it.
        try:
            response = run(raw, LocalLambdaContext(timeout_seconds=16))
        except StepError as exc:
            assert "no time left to run it" in str(exc)
            assert left_at_own_keys(s3, raw)
            return
        assert sorted(seen) == sorted(f"doc{i}.md" for i in range(8))
        assert time.monotonic() - started < 16
        return
    response = run(raw, LocalLambdaContext(timeout_seconds=16))
    assert time.monotonic() - started < 16
    written = outputs(s3, raw, response)
    assert [sum(len(b) for b in f) for f in written] == [4] * 8


def test_chunks_are_written_in_document_order_whatever_order_a_step_returns_them_in(s3: Any) -> None:
    @transformation
    def backwards(document: Document) -> list[Chunk]:
        first, *rest = document.chunks
        return [*reversed(rest), *first.split(["Alpha one.", " Contact ops@example.com now."])[::-1]]

    raw = staged(s3, BODIES)
    written = outputs(s3, raw, backwards(raw, LocalLambdaContext()))[0]
    bodies = [[i["contentBody"].rpartition("\n\n")[2] for i in batch] for batch in written]
    # Across places, document order; within one place (the split's parts), the step's order.
    assert bodies == [
        [" Contact ops@example.com now.", "Alpha one.", "Beta two is boilerplate."],
        ["Gamma three.", "Delta four."],
    ]


def test_a_step_rechunks_the_whole_document_its_chunks_placed_where_they_start(s3: Any) -> None:
    """Fixed-size chunks with overlaps, chunked again by sentence: no overlap repeated, each sentence
    written where it starts, with that chunk's metadata."""
    bodies = [
        ["First sentence here. Second sent", "Second sentence goes on. Third sentence"],
        ["Third sentence ends. Fourth."],
    ]

    @transformation
    def by_sentence(document: Document) -> list[Chunk]:
        return document.rechunk(re.findall(r"[^.]+\.", document.text))

    raw = staged(s3, bodies)

    def gap(document: Document) -> list[Chunk]:
        return document.rechunk(["First sentence here."])  # the rest of the document left out

    failing(s3, transformation(gap), raw, "2 of the document's chunks neither returned nor dropped")
    written = outputs(s3, raw, by_sentence(raw, LocalLambdaContext()))[0]
    placed = [
        [(i["contentBody"].rpartition("\n\n")[2], i["contentMetadata"]["n"]) for i in b] for b in written
    ]
    # " Second ..." starts (its space) in the first chunk, " Third ..." in the second: placed there.
    assert placed == [
        [
            ("First sentence here.", "1.0"),
            (" Second sentence goes on.", "1.0"),
            (" Third sentence ends.", "1.1"),
        ],
        [(" Fourth.", "2.0")],
    ]

    with pytest.raises(ValueError, match="rechunk: text 0 is not in the document"):
        Document("s3://b/a", "a", {}, (Chunk("abc"),)).rechunk(["abd"])


@pytest.mark.parametrize("mode", ["per_chunk", "grouped", "published"])
def test_claudes_contexts_follow_the_chunks_a_step_returns_in_every_mode(
    s3: Any, standin: Any, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Split, merged, dropped and added chunks change the document's count per batch object, which the
    published mode's units follow: each chunk written still gets its own context from the model."""
    monkeypatch.setenv("CONTEXT_MODE", mode)

    @transformation
    def shape(document: Document) -> list[Chunk | Dropped]:
        a, b, c, d = document.chunks
        return [
            *a.split(["Alpha one.", " Contact ops@example.com now."]),
            b.drop("boilerplate"),
            c.merged_with(d),
            Chunk("Epilogue."),
        ]

    raw = staged(s3, BODIES)
    written = outputs(s3, raw, shape(raw, LocalLambdaContext()))[0]
    bodies = [[i["contentBody"].rpartition("\n\n")[2] for i in b] for b in written]
    assert bodies == [
        ["Alpha one.", " Contact ops@example.com now."],
        ["Gamma three.\nDelta four.", "Epilogue."],
    ]
    contexts = [i["contentMetadata"]["ckb_context"] for b in written for i in b]
    assert all(c.startswith("This chunk is from") for c in contexts) and len(contexts) == 4
    assert standin.stats.answered >= 1
