"""Batch records from pending documents, jobs within Bedrock's limits, and contexts from output records. Pure.

A record asks for the contexts of up to ``group_size`` chunks of one document, exactly as the Lambda's
grouped mode does (the same prompt, markers, parser and answer checks: ``runtime/context/claude``), with the
whole document, or for a long one its opening and a window, as "the document"; batch inference has no prompt
caching, so no ``cache_control``. Output records are matched to their requests by ``recordId``, never by
position (AWS: "The order of records in the output JSONL file is not guaranteed to match the order of
records in the input JSONL file").
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextual_kb.runtime.context.claude.answers import check_answer
from contextual_kb.runtime.context.claude.prompts import (
    PromptSettings,
    grouped_request,
    marked_unit,
    marker_code,
    parse_grouped,
)
from contextual_kb.runtime.context.claude.windows import plan_units
from contextual_kb.runtime.documents import Document, Span
from contextual_kb.runtime.pending import PendingDocument

RECORD_ID_LENGTH = 11  # "alphanumeric", 11 characters in AWS's examples ("CALL0000001")
# Claude reads about 3.5 bytes of code or English a token; the floor and the estimates count with it (the
# local stand-in counts the same way, so local figures are on one scale).
BYTES_PER_TOKEN = 3.5


def count_tokens(text: str) -> int:
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / BYTES_PER_TOKEN) if text else 0


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-job limits of Bedrock batch inference. Each is a Service Quota of its own, per model, account and
    Region; the values here are common defaults, to check in Service Quotas for the chosen model. Records
    per job and records per input file are two quotas, kept apart: a job here has one input file, so it
    holds at most the smaller of each pair (records, bytes)."""

    min_records: int = 100  # "Minimum number of records per batch inference job"
    max_job_records: int = 50_000  # "Records per batch inference job"
    max_file_records: int = 50_000  # "Records per input file per batch inference job"
    max_file_bytes: int = 1024**3  # "Batch inference input file size": 1 GB
    max_job_bytes: int = 5 * 1024**3  # "Batch inference job size": 5 GB

    @property
    def records_per_job(self) -> int:
        """What one job (one input file) may hold, by both record quotas."""
        return min(self.max_job_records, self.max_file_records)

    @property
    def bytes_per_job(self) -> int:
        """What one job's input (one file) may weigh, by both size quotas."""
        return min(self.max_file_bytes, self.max_job_bytes)


@dataclass(frozen=True, slots=True)
class Planned:
    """One record: its id, the document (pending record key) and chunks it asks for, and its JSONL line."""

    record_id: str
    document: str  # the pending record's key
    model_id: str
    unit: int
    chunks: tuple[int, ...]  # 0-based chunk indices
    line: bytes  # {"recordId", "modelInput"} as one JSONL line, newline included
    input_tokens: int  # estimated

    @property
    def size(self) -> int:
        return len(self.line)


def prompt_of(document: PendingDocument) -> PromptSettings:
    snapshot = document.prompt
    return PromptSettings(
        model_id=snapshot.model_id,
        instruction=snapshot.instruction,
        glossary=snapshot.glossary,
        context_max_tokens=snapshot.context_max_tokens,
    )


def rebuilt(document: PendingDocument) -> Document:
    return Document(document.text, tuple(Span(start, end) for start, end in document.spans))


def unit_texts(document: PendingDocument) -> Iterator[tuple[int, tuple[int, ...], str]]:
    """(unit number, its chunks, the marked text the model is shown), as the Lambda's grouped mode builds
    them (every chunk of the unit marked, two markers where two chunks start at one place)."""
    snapshot = document.prompt
    units = plan_units(
        rebuilt(document),
        max_tokens=snapshot.max_document_tokens,
        window_tokens=snapshot.window_tokens,
        opening_tokens=snapshot.opening_tokens,
    )
    code = marker_code(document.text)
    spans = document.spans
    for number, unit in enumerate(units):
        yield number, unit.chunks, marked_unit(unit, document.text, lambda i: spans[i][0], code)


def model_input(request: dict[str, Any]) -> dict[str, Any]:
    """An InvokeModel body from ``messages.create`` keyword arguments (the SDK sends these fields)."""
    body = {k: v for k, v in request.items() if k not in {"model", "extra_body"}}
    return {**body, **request.get("extra_body", {})}


def build(
    key: str, document: PendingDocument, wanted: Sequence[int], group_size: int, next_id: Iterator[str]
) -> list[Planned]:
    """The records asking for the contexts of chunks ``wanted`` (0-based) of ``document``."""
    wanted_set = set(wanted)
    prompt = prompt_of(document)
    code = marker_code(document.text)
    out: list[Planned] = []
    for number, chunks, text in unit_texts(document):
        asked = [i for i in chunks if i in wanted_set]
        for start in range(0, len(asked), group_size):
            group = tuple(asked[start : start + group_size])
            request = grouped_request(
                prompt, marked_document=text, numbers=[i + 1 for i in group], cache=False, code=code
            )
            body = model_input(request)
            record_id = next(next_id)
            line = json.dumps({"recordId": record_id, "modelInput": body}, ensure_ascii=False)
            encoded = _utf8(line) + b"\n"
            tokens = (
                count_tokens(prompt.system)
                + count_tokens(text)
                + count_tokens(body["messages"][0]["content"][1]["text"])
            )
            out.append(Planned(record_id, key, prompt.model_id, number, group, encoded, tokens))
    return out


def _utf8(line: str) -> bytes:
    try:
        return line.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate in the document: the line as ASCII-escaped JSON
        return json.dumps(json.loads(line)).encode("ascii")


def record_ids() -> Iterator[str]:
    """11-character alphanumeric record ids, unique within a run: a letter then a counter."""
    number = 0
    while True:
        number += 1
        yield f"R{number:0{RECORD_ID_LENGTH - 1}d}"


def split_jobs(sizes: Sequence[int], limits: Limits) -> list[list[int]]:
    """Record indices per job, one input file a job: within both record quotas (per job, per input file) and
    both size quotas (``Limits.records_per_job``, ``bytes_per_job``), as few jobs as that allows, of even
    size so that none falls below ``min_records`` when the total is above it. Raises if one record alone
    passes the size limit."""
    if not sizes:
        return []
    byte_cap = limits.bytes_per_job
    if max(sizes) > byte_cap:
        raise ValueError(f"a record of {max(sizes):,} bytes passes the input file limit")
    count = max(math.ceil(len(sizes) / limits.records_per_job), math.ceil(sum(sizes) / byte_cap))
    while True:
        target = math.ceil(len(sizes) / count)
        jobs: list[list[int]] = [[]]
        total = 0
        for index, size in enumerate(sizes):
            if jobs[-1] and (len(jobs[-1]) >= target or total + size > byte_cap):
                jobs.append([])
                total = 0
            jobs[-1].append(index)
            total += size
        if len(jobs) <= count or count >= len(sizes):
            return jobs
        count += 1  # bytes were uneven: one more job, sizes evened again


@dataclass
class Output:
    """One output record, parsed."""

    record_id: str
    text: str = ""
    stop_reason: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    error: str = ""  # set when the record failed (or is malformed)


def parse_output(line: str) -> Output | None:
    """An output line as Bedrock writes it (``{recordId, modelInput, modelOutput}`` or ``{..., error}``);
    None for a line without a record id (nothing to match it to)."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("recordId"), str):
        return None
    out = Output(data["recordId"])
    error = data.get("error")
    if error:
        detail = error if isinstance(error, dict) else {"errorMessage": str(error)}
        out.error = f"{detail.get('errorCode', '')} {detail.get('errorMessage', '')}".strip() or "error"
        return out
    output = data.get("modelOutput")
    content = output.get("content") if isinstance(output, dict) else None
    texts = [b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]
    if not isinstance(output, dict) or not texts:
        out.error = "malformed: no text in modelOutput"
        return out
    usage = output.get("usage") if isinstance(output.get("usage"), dict) else {}
    out.text = "".join(texts)
    out.stop_reason = str(output.get("stop_reason", ""))
    out.input_tokens = int(usage.get("input_tokens", 0) or 0)
    out.output_tokens = int(usage.get("output_tokens", 0) or 0)
    return out


@dataclass
class Accepted:
    contexts: dict[int, str] = field(default_factory=dict)  # chunk index -> context
    rejected: dict[str, int] = field(default_factory=dict)  # why, counted


def accept(
    document: PendingDocument, normalized_unit: str, chunks: Sequence[int], output: Output
) -> Accepted:
    """The contexts an output record gives, checked as the Lambda checks an answer (``normalized_unit``:
    ``normalize`` of the unit's text as the record showed it); the rest rejected."""
    result = Accepted()
    normalized = normalized_unit
    # The function's grouped mode's rule: the parser keeps only closed elements, so an answer cut at
    # max_tokens loses only the context it was writing (counted missing); the closed ones are whole.
    answers = parse_grouped(output.text, [i + 1 for i in chunks])
    for index in chunks:
        answer = answers.get(index + 1)
        if answer is None:
            result.rejected["missing"] = result.rejected.get("missing", 0) + 1
            continue
        verdict = check_answer(
            answer,
            chunk=document.chunk(index),
            normalized_document=normalized,
            max_chars=document.prompt.context_max_chars,
        )
        if verdict.text is None:
            result.rejected[verdict.reason] = result.rejected.get(verdict.reason, 0) + 1
        else:
            result.contexts[index] = verdict.text
    return result
