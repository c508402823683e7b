"""The batch files: JSONL lines read from a streamed S3 body, output records parsed (every line charged),
an on-demand answer written in an output line's shape (one reader reads both), and what a job's status says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from contextual_kb.deferred.records import Output, parse_output

ENDED = {"Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired"}
# A stopped job keeps the outputs of the records it processed (AWS: results appear from InProgress on).
USABLE = {"Completed", "PartiallyCompleted", "Stopped"}


def lines(body: Any, piece_bytes: int = 1 << 20) -> Iterator[bytes]:
    """The lines of a streamed S3 body, without their newline, read a megabyte at a time. JSONL lines end at
    newlines only: a U+2028 in a text is text (``str.splitlines`` would cut there)."""
    rest = b""
    for piece in body.iter_chunks(piece_bytes):
        lines = (rest + piece).split(b"\n")
        rest = lines.pop()
        yield from lines
    if rest:
        yield rest


def parse_outputs(
    lines: Iterable[bytes],
    into: dict[str, Output] | None = None,
    charge: Callable[[Output], None] | None = None,
) -> dict[str, Output]:
    """Output records by id from JSONL lines (split at newlines only: a U+2028 in a context is text; added
    to ``into``), the first valid one where an id repeats. ``charge`` is given every line read, used or
    not: AWS bills the tokens of each."""
    found: dict[str, Output] = {} if into is None else into
    for raw in lines:
        if not raw.strip():
            continue
        output = parse_output(raw.decode("utf-8", "replace"))
        if output is not None and charge is not None:
            charge(output)
        if output is not None and (
            output.record_id not in found or (found[output.record_id].error and not output.error)
        ):
            found[output.record_id] = output
    return found


def as_output_line(output: Output) -> dict[str, Any]:
    """An on-demand answer in a batch output line's shape, so one reader reads both."""
    if output.error:
        return {"recordId": output.record_id, "error": {"errorCode": 0, "errorMessage": output.error}}
    return {
        "recordId": output.record_id,
        "modelOutput": {
            "content": [{"type": "text", "text": output.text}],
            "stop_reason": output.stop_reason,
            "usage": {"input_tokens": output.input_tokens, "output_tokens": output.output_tokens},
        },
    }
