"""Batch records: built like the Lambda's grouped calls, split within the limits, outputs matched by id and
checked as answers. Pure."""

from __future__ import annotations

import json
import re

import pytest

from contextual_kb.deferred.records import (
    Limits,
    Output,
    accept,
    build,
    parse_output,
    record_ids,
    split_jobs,
    unit_texts,
)
from contextual_kb.runtime.context.claude.answers import normalize
from contextual_kb.runtime.pending import PendingDocument, PromptSnapshot, text_hash

TEXT = "# Guide\n\nAlpha section text here.\n\n## Install\n\nRun the installer twice.\n\n## Use\n\nCall it."


def document(pending: list[int] | None = None) -> PendingDocument:
    starts = [0, TEXT.index("## Install"), TEXT.index("## Use")]
    spans = list(zip(starts, [*starts[1:], len(TEXT)], strict=True))
    return PendingDocument(
        memory_key="contextual-kb/contexts/f/ab/abc.json",
        fingerprint="f",
        text_sha256=text_hash(TEXT),
        text=TEXT,
        spans=spans,
        pending=pending if pending is not None else [0, 1, 2],
        prompt=PromptSnapshot(model_id="global.anthropic.claude-haiku-4-5-20251001-v1:0"),
    )


def test_records_are_the_lambdas_grouped_requests_without_cache_and_with_11_character_ids() -> None:
    planned = build("k", document([0, 2]), [0, 2], group_size=1, next_id=record_ids())
    assert [p.record_id for p in planned] == ["R0000000001", "R0000000002"]
    assert all(re.fullmatch(r"[A-Za-z0-9]{11}", p.record_id) for p in planned)
    assert [p.chunks for p in planned] == [(0,), (2,)]
    line = json.loads(planned[0].line)
    body = line["modelInput"]
    assert body["anthropic_version"] == "bedrock-2023-05-31" and body["temperature"] == 0.0
    assert "model" not in body and "extra_body" not in body
    document_block, question = body["messages"][0]["content"]
    assert "cache_control" not in document_block  # batch inference has no prompt caching
    assert document_block["text"].count("⟪chunk ") == 3  # every chunk of the unit marked, as the Lambda does
    assert "Chunks: 1." in question["text"]
    assert planned[0].line.endswith(b"\n")


def test_jobs_stay_within_records_and_bytes_and_are_even() -> None:
    assert split_jobs([], Limits()) == []
    limits = Limits(min_records=2, max_job_records=4, max_file_bytes=1000, max_job_bytes=1000)
    jobs = split_jobs([10] * 10, limits)
    assert [len(j) for j in jobs] == [4, 3, 3] or [len(j) for j in jobs] == [4, 4, 2]
    assert sorted(i for j in jobs for i in j) == list(range(10))
    assert all(len(j) <= 4 for j in jobs)
    by_bytes = split_jobs([400] * 5, limits)  # 1,000 bytes a job: two records each
    assert all(sum(400 for _ in j) <= 1000 for j in by_bytes) and sum(map(len, by_bytes)) == 5
    with pytest.raises(ValueError, match="passes the input file limit"):
        split_jobs([2000], limits)


def test_output_lines_are_parsed_strictly() -> None:
    ok = json.dumps(
        {
            "recordId": "R0000000001",
            "modelInput": {},
            "modelOutput": {
                "content": [{"type": "text", "text": "hi"}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 10, "output_tokens": 3},
            },
        }
    )
    parsed = parse_output(ok)
    assert parsed is not None and (parsed.text, parsed.input_tokens, parsed.output_tokens) == ("hi", 10, 3)
    failed = parse_output(json.dumps({"recordId": "R1", "error": {"errorCode": 400, "errorMessage": "bad"}}))
    assert failed is not None and failed.error == "400 bad"
    malformed = parse_output(json.dumps({"recordId": "R2", "modelOutput": {"content": []}}))
    assert malformed is not None and malformed.error.startswith("malformed")
    assert parse_output("not json") is None and parse_output(json.dumps({"modelOutput": {}})) is None


def test_answers_are_checked_like_the_lambdas_and_the_rest_stay_pending() -> None:
    doc = document()
    (_, _, text), *_ = list(unit_texts(doc))
    # Chunk 2's answer is empty, chunk 3 is not answered at all.
    answer = '<context chunk="1">The guide opens.</context>\n<context chunk="2">   </context>'
    result = accept(doc, normalize(text), [0, 1, 2], Output("R", text=answer))
    assert result.contexts == {0: "The guide opens."}
    assert result.rejected == {"empty": 1, "missing": 1}


def test_an_answer_cut_at_max_tokens_keeps_its_closed_contexts_whole_as_the_function_does() -> None:
    """The grouped mode's rule (engine.py): the parser keeps closed elements only, so a cut answer loses
    the context it was writing (missing), and the closed ones are whole, never marked truncated."""
    doc = document()
    (_, _, text), *_ = list(unit_texts(doc))
    cut = (
        '<context chunk="1">The guide opens the manual.</context>\n'
        '<context chunk="2">Installing it, run twice.</context>\n<context chunk="3">How to call'
    )
    output = Output("R", text=cut, stop_reason="max_tokens")
    result = accept(doc, normalize(text), [0, 1, 2], output)
    assert result.contexts == {0: "The guide opens the manual.", 1: "Installing it, run twice."}
    assert result.rejected == {"missing": 1}


@pytest.mark.parametrize(("job", "file"), [(4, 50_000), (50_000, 4), (4, 6), (6, 4)])
def test_records_per_job_and_per_input_file_are_two_quotas_and_a_job_keeps_within_both(
    job: int, file: int
) -> None:
    """One input file a job: a job holds at most the smaller of the two record quotas, whichever it is."""
    limits = Limits(min_records=1, max_job_records=job, max_file_records=file)
    jobs = split_jobs([10] * 10, limits)
    assert max(len(j) for j in jobs) <= 4 and len(jobs) == 3
    assert sorted(i for j in jobs for i in j) == list(range(10))
