"""Terminal output for local runs (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from contextual_kb.enrichment import BODY_SEPARATOR
from contextual_kb.local.runner import RunResult
from contextual_kb.terminal import clean, plain

PREVIEW_CHARS = 360


def print_summary(console: Console, result: RunResult) -> None:
    table = Table(title="Transformation summary", show_lines=False, expand=False)
    for column in ("source file", "batches in", "batches out", "chunks", "contextualized"):
        table.add_column(column, justify="left" if column == "source file" else "right")
    for f in result.files:
        table.add_row(
            plain(f.source.removeprefix("s3://")),
            str(f.batches_in),
            str(f.batches_out),
            str(f.chunks_in),
            str(f.contextualized),
        )
    total_chunks = sum(f.chunks_in for f in result.files)
    total_ctx = sum(f.contextualized for f in result.files)
    table.add_row("[bold]total", "", "", f"[bold]{total_chunks}", f"[bold]{total_ctx}")
    console.print(table)


def print_chunks(console: Console, result: RunResult, count: int) -> None:
    """The first ``count`` chunks of each file: the original, then the context the transformation added."""
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
            if context:
                body.append(clean(context), style="bold green")
                body.append("\n\n")
            body.append(clean(_preview(old.content_body)), style="dim")
            uri = produced["originalFileLocation"].get("s3_location", {}).get("uri", "?")
            title = f"{uri} · chunk {index + 1}"
            console.print(
                Panel(
                    body, title=plain(title), title_align="left", subtitle="context (green) + original chunk"
                )
            )


def _preview(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS].rstrip() + " …"
