"""Terminal output for local runs (rich): readable at 80 columns, in colour or without."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from contextual_kb.cli.terminal import clean, one_line, plain
from contextual_kb.local.runner import RunResult
from contextual_kb.runtime.enrichment import BODY_SEPARATOR
from contextual_kb.runtime.models import ContentItem
from contextual_kb.runtime.transform import END_KEY, SECTION_KEY, START_KEY

PREVIEW_CHARS = 360
PREVIEW_LINES = 10  # ckb query's chunks: at most this many lines each, unless --full
# Batches out are left to --json: the source's name needs the width at 80 columns.
_NUMBER_COLUMNS = ("batches", "chunks in", "chunks out", "contexts")
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
            str(f.chunks_in),
            str(f.chunks_out),
            str(f.contextualized),
        )
    totals = [
        sum(getattr(f, name) for f in result.files) for name in ("chunks_in", "chunks_out", "contextualized")
    ]
    table.add_row("total", "", *map(str, totals), style="bold")
    console.print(table, soft_wrap=False)


STANDIN_CONTEXT = "context (the stand-in's, made by rule: not a model's)"


def print_chunks(console: Console, result: RunResult, count: int, *, label: str = "context") -> None:
    """The first ``count`` chunks of each file: the context the transformation added (labelled, so it reads
    without colour; ``label`` says whose it is), then the chunk (the KB's, or, chunked here by structure,
    ours with its section)."""
    for given, produced in zip(result.response_inputs(), result.response["outputFiles"], strict=True):
        before = [i for k in given for i in result.before[k].file_contents if i.is_text]
        after = [
            i for b in produced["contentBatches"] for i in result.after[b["key"]].file_contents if i.is_text
        ]
        rechunked = len(before) != len(after) or any(START_KEY in (i.content_metadata or {}) for i in after)
        for index, new in enumerate(after[:count]):
            context, chunk = split_body(new, None if rechunked else before[index])
            body = Text()
            body.append(f"{label}: ", style="bold")
            if context:
                body.append(clean(context), style="green")
            else:
                body.append("(none: the chunk passed through unchanged)", style="italic")
            body.append("\n\n")
            body.append("chunk: ", style="bold")
            body.append(clean(_preview(chunk)), style="dim")
            uri = produced["originalFileLocation"].get("s3_location", {}).get("uri", "?")
            title = f"{source_label(uri, max(MIN_SOURCE_WIDTH, console.width - 20))} · chunk {index + 1}"
            section = (new.content_metadata or {}).get(SECTION_KEY)
            if rechunked and isinstance(section, str) and section:
                title += f" · {section}"
            # Panels lay their text out to the width themselves, piped or not.
            console.print(Panel(body, title=plain(title), title_align="left"), soft_wrap=False)


def split_body(new: ContentItem, old: ContentItem | None) -> tuple[str, str]:
    """(context, chunk) of an output item: the chunk is the KB's item's text (``old``) or, for a chunk made
    here, the last ``ckb_end - ckb_start`` characters of the body. Pure."""
    body = new.content_body
    if old is not None:
        chunk = old.content_body
    else:
        metadata = new.content_metadata or {}
        start, end = metadata.get(START_KEY), metadata.get(END_KEY)
        if not isinstance(start, int) or not isinstance(end, int) or not 0 <= end - start <= len(body):
            return "", body
        chunk = body[len(body) - (end - start) :]
    if body == chunk or not body.endswith(BODY_SEPARATOR + chunk):
        return "", body
    return body[: len(body) - len(chunk) - len(BODY_SEPARATOR)], chunk


def _preview(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS].rstrip() + " …"


def model_lines(summary: dict[str, Any], where: str, *, standin: bool) -> list[str]:
    """Where the model calls of a run went, how many, their tokens and cost, and every chunk that fell back
    to a structural context and why: from the handler's "transformation complete" log line. Pure."""
    model = summary.get("model") or {}
    calls, retries = int(model.get("calls", 0)), int(model.get("retries", 0))
    remembered = int(model.get("chunks_remembered", 0))
    lines = [
        f"model calls: {calls} to {where}"
        + (f", {retries} retried" if retries else "")
        + (f"; {remembered} chunk(s) took the context remembered from an earlier run" if remembered else "")
    ]
    cost = float(model.get("estimated_cost_usd", 0.0))
    price = "what Amazon Bedrock would charge; the stand-in charges nothing" if standin else "estimated"
    lines.append(
        f"tokens: {model.get('input_tokens', 0):,} in, {model.get('cache_read_tokens', 0):,} read from "
        f"cache, {model.get('cache_write_tokens', 0):,} written to it, {model.get('output_tokens', 0):,} "
        f"out; "
        f"cost ${cost:.4f} ({price})"
    )
    fallbacks = {str(k): int(v) for k, v in (model.get("fallbacks") or {}).items() if v}
    if fallbacks:
        failed = {str(k): int(v) for k, v in (model.get("failed_calls") or {}).items() if v}
        why = ", ".join(f"{reason} {count}" for reason, count in sorted(fallbacks.items()))
        calls_failed = ", ".join(f"{kind} {count}" for kind, count in sorted(failed.items()))
        lines.append(
            f"fallbacks: {sum(fallbacks.values())} chunk(s) got a structural context instead of the model's "
            f"({why})" + (f"; failed calls: {calls_failed}" if calls_failed else "")
        )
    return lines


def model_gave_nothing(summary: dict[str, Any]) -> bool:
    """True when the model was asked and no chunk got its context: every context was a fallback. Pure."""
    model = summary.get("model") or {}
    answered = int(model.get("chunks_from_model", 0)) + int(model.get("chunks_remembered", 0))
    return answered == 0 and sum(int(v) for v in (model.get("fallbacks") or {}).values()) > 0


def print_results(console: Console, results: list[Any], *, show: int, full: bool = False) -> None:
    """``ckb query``'s output: the first ``show`` results (0: all) as panels, each chunk cut to
    :data:`PREVIEW_CHARS` unless ``full``, then what was left out and how to see it (``results``:
    ``query.retrieval.Result``). Readable at 80 columns: every field wraps to the width, none is a column."""
    shown = results if show == 0 else results[:show]
    print_result_panels(console, shown, full=full)
    more = len(results) - len(shown)
    if more:
        console.print(
            plain(f"{more} more result(s) retrieved, not shown: --show {len(results)} (or 0), or --json"),
            style="dim",
        )


def _chunk_text(text: str, full: bool) -> str:
    """The chunk as shown: whole with ``full``, else its first :data:`PREVIEW_CHARS` and what was cut."""
    kept = "\n".join(text[:PREVIEW_CHARS].split("\n")[:PREVIEW_LINES])  # 360 newlines are 360 lines
    if full or kept == text:
        return text
    kept = kept.rstrip()
    return f"{kept} … ({len(text) - len(kept):,} more chars; --full)"


def print_result_panels(
    console: Console, results: list[Any], *, label: str = "context", full: bool = False
) -> None:
    """Results one panel each, as the demo shows chunks: rank, scores and source in the title (the source
    cut from its head so the file name stays), then the context and the original chunk apart, wrapped to the
    width (``results``: ``query.retrieval.Result``)."""
    if not results:
        console.print("no results")
        return
    for r in results:
        body = Text()
        body.append(f"{label}: ", style="bold")
        body.append(clean(r.context) if r.context else "(none)", style="green")
        body.append("\n\nchunk: ", style="bold")
        body.append(clean(_chunk_text(r.text, full)), style="dim")
        rerank = "" if r.rerank_score is None else f"rerank {r.rerank_score:.3f} · "
        scores = f"#{r.rank} · {rerank}retrieval {r.retrieval_score:.3f} · "
        # The title sits in the top border: what the scores and the corners leave of the width.
        room = max(MIN_SOURCE_WIDTH, console.width - len(scores) - 6)
        title = scores + source_label(one_line(r.source), room)
        console.print(Panel(body, title=plain(title), title_align="left"), soft_wrap=False)
