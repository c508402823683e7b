"""Terminal output for local runs (rich): readable at 80 columns, in colour or without."""

from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from contextual_kb.cli.terminal import clean, plain
from contextual_kb.local.runner import RunResult
from contextual_kb.runtime.enrichment import BODY_SEPARATOR

PREVIEW_CHARS = 360
_NUMBER_COLUMNS = ("batches in", "batches out", "chunks", "contextualized")
MIN_SOURCE_WIDTH = 16


def source_label(uri: str, width: int) -> str:
    """What tells files apart: the object key (the bucket is the same for all), cut from the head when it
    does not fit, so its tail (the file name) stays. Pure."""
    key = uri.removeprefix("s3://").split("/", 1)[-1] if uri.startswith("s3://") else uri
    return key if len(key) <= width else "…" + key[-(width - 1) :]


def print_summary(console: Console, result: RunResult) -> None:
    table = Table(title="Transformation summary", show_lines=False, expand=False)
    table.add_column("source file", justify="left", no_wrap=True)
    for column in _NUMBER_COLUMNS:
        table.add_column(column, justify="right", no_wrap=True)
    # What the number columns and the borders leave of the console's width goes to the key.
    width = max(MIN_SOURCE_WIDTH, console.width - sum(len(c) + 3 for c in _NUMBER_COLUMNS) - 4)
    for f in result.files:
        table.add_row(
            plain(source_label(f.source, width)),
            str(f.batches_in),
            str(f.batches_out),
            str(f.chunks_in),
            str(f.contextualized),
        )
    total_chunks = sum(f.chunks_in for f in result.files)
    total_ctx = sum(f.contextualized for f in result.files)
    table.add_row("total", "", "", str(total_chunks), str(total_ctx), style="bold")
    console.print(table, soft_wrap=False)


def print_chunks(console: Console, result: RunResult, count: int) -> None:
    """The first ``count`` chunks of each file: the context the transformation added (labelled, so it reads
    without colour), then the original chunk."""
    for given, produced in zip(result.response_inputs(), result.response["outputFiles"], strict=True):
        before = [i for k in given for i in result.before[k].file_contents if i.is_text]
        after = [
            i for b in produced["contentBatches"] for i in result.after[b["key"]].file_contents if i.is_text
        ]
        for index, (old, new) in enumerate(list(zip(before, after, strict=True))[:count]):
            context = ""
            if new.content_body != old.content_body:
                context = new.content_body[
                    : len(new.content_body) - len(old.content_body) - len(BODY_SEPARATOR)
                ]
            body = Text()
            body.append("context: ", style="bold")
            if context:
                body.append(clean(context), style="green")
            else:
                body.append("(none: the chunk passed through unchanged)", style="italic")
            body.append("\n\n")
            body.append("chunk: ", style="bold")
            body.append(clean(_preview(old.content_body)), style="dim")
            uri = produced["originalFileLocation"].get("s3_location", {}).get("uri", "?")
            title = f"{source_label(uri, max(MIN_SOURCE_WIDTH, console.width - 20))} · chunk {index + 1}"
            # Panels lay their text out to the width themselves, piped or not.
            console.print(Panel(body, title=plain(title), title_align="left"), soft_wrap=False)


def _preview(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS].rstrip() + " …"
