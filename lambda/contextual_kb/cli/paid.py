"""Paid work asks first: what it is, what it should cost, then a yes (``--yes``, or a person at a terminal).

A command that would spend money on the user's account (Bedrock model calls with ``--bedrock``, ``eval``
with a model or a stack, ``contextualize``) prints its estimate on stderr and goes on only when told to.
Without a terminal to ask on and without ``--yes`` it stops, in one line, before any paid call.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import typer

from contextual_kb.cli.errors import CliError
from contextual_kb.cli.terminal import error_console

YES_HELP = "Go on with paid work without asking (its estimate is printed first)."
# Around each chunk: the system prompt and the instruction (162 tokens by the engine's own estimate, UTF-8
# bytes / 3) and the tags. Out: 74 tokens a context measured on the codebase corpus (docs/BENCHMARKS.md,
# "Contextualizing with Claude") for the estimate, the CONTEXT_MAX_TOKENS cap for the bound.
PROMPT_TOKENS = 180
TYPICAL_OUTPUT_TOKENS = 74


@dataclass(frozen=True)
class Estimate:
    usd: float  # documents the model can cache written once and read by the calls after the first
    most_usd: float  # no cache read at all and every context as long as it may be
    calls: int

    def line(self) -> str:
        return f"about ${self.usd:,.2f}, at most ${self.most_usd:,.2f} ({self.calls:,} model calls)"


def estimate_contexts(
    documents: Sequence[tuple[int, int]], model_id: str, *, min_cache_tokens: int, max_output_tokens: int
) -> Estimate:
    """What per-chunk contexts (the default mode: a call per chunk, the document prompt-cached) cost for
    ``documents`` given as (document tokens, chunks), at the model's on-demand prices. Pure."""
    from contextual_kb.runtime.context.claude.pricing import prices_for

    prices = prices_for(model_id)
    usd = most = 0.0
    calls = 0
    for tokens, chunks in documents:
        if chunks <= 0:
            continue
        calls += chunks
        around = (tokens / chunks + PROMPT_TOKENS) * prices.input  # the chunk and the prompt, each call
        most += chunks * (around + tokens * prices.input + max_output_tokens * prices.output)
        usd += chunks * (around + TYPICAL_OUTPUT_TOKENS * prices.output)
        if tokens >= min_cache_tokens and chunks > 1:
            usd += tokens * prices.cache_write("5m") + (chunks - 1) * tokens * prices.cache_read
        else:
            usd += chunks * tokens * prices.input
    return Estimate(usd / 1e6, most / 1e6, calls)


def corpus_sizes(documents: Sequence[dict[str, Any]]) -> list[tuple[int, int]]:
    """(tokens by the model engine's estimate, chunks) of each document of a pre-chunked corpus (the
    codebase benchmark's format): what an estimate needs."""
    from contextual_kb.runtime.context.claude.windows import estimate_tokens

    return [(estimate_tokens(d["content"]), len(d["chunks"])) for d in documents]


def _interactive() -> bool:
    return sys.stdin.isatty()


# Every endpoint a command's paid work may reach: the Knowledge Base's API (ingestion runs the
# transformation), Bedrock's (batch inference) and the model's. ``ckb local`` points all three at stand-ins.
STANDIN_ENDPOINTS = (
    "AWS_ENDPOINT_URL_BEDROCK_AGENT",
    "AWS_ENDPOINT_URL_BEDROCK",
    "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
)


def local_standin() -> str | None:
    """The Knowledge Base stand-in's URL when every endpoint paid work may reach is set and answered by a
    stand-in (each says so itself: local/identity.py), else None: one real endpoint among them, or one left
    to AWS, and the work is paid."""
    import os

    from contextual_kb.local.identity import standin_at

    urls = [os.environ.get(name, "") for name in STANDIN_ENDPOINTS]
    if all(url and standin_at(url) for url in urls):
        return urls[0]
    return None


def confirm(what: str, estimate: str, *, yes: bool) -> None:
    """Say what the paid work is and its estimate (stderr); go on only with ``--yes`` or a person's yes.
    Against a local stack's stand-ins the work is free: said so, and nothing asked."""
    standin = local_standin()
    if standin is not None:
        error_console().print(
            f"free: {what} on the local stand-ins at {standin} (ckb local), which charge nothing; on AWS it "
            f"would be {estimate}",
            markup=False,
        )
        return
    error_console().print(f"paid: {what}: {estimate}", markup=False)
    if yes:
        return
    if not _interactive():
        raise CliError(
            "paid work not started",
            "standard input is not a terminal to ask for a yes",
            "Pass --yes to go on (the estimate is above)",
        )
    if not typer.confirm("Go on?", default=False, err=True):
        raise typer.Abort()


def confirm_contexts(documents: Sequence[tuple[int, int]], *, yes: bool, also: str = "") -> None:
    """Model contexts for ``documents`` (tokens, chunks) on the user's account: the estimate, then a yes.
    ``also`` names what else the work pays for, unpriced here."""
    from contextual_kb.runtime.context.claude.pricing import min_cache_tokens
    from contextual_kb.runtime.settings import Settings

    settings = Settings.from_env()
    estimate = estimate_contexts(
        documents,
        settings.model_id,
        min_cache_tokens=min_cache_tokens(settings.model_id, settings.min_cache_tokens),
        max_output_tokens=settings.context_max_tokens,
    )
    chunks = sum(count for _, count in documents)
    what = f"{chunks:,} chunk contexts by {settings.model_id}" + (
        "" if local_standin() else " on Amazon Bedrock"
    )
    confirm(what, estimate.line() + (f", plus {also}" if also else ""), yes=yes)
