"""What a deferred run costs, and its floor: pure functions of the records, the answers' usage and the
prices (``runtime/context/claude/pricing.py``: the batch prices, and the on-demand ones, each from the
table or the options' JSON). No AWS, no run state: a test prices a summary alone."""

from __future__ import annotations

from collections.abc import Sequence

from contextual_kb.deferred.options import Summary
from contextual_kb.deferred.spool import Spooled
from contextual_kb.runtime.context.claude.pricing import BatchPrices, Prices, batch_prices_for, prices_for

# When nothing is known of a document's context length, an output's estimate (dry run): measured on the
# codebase corpus, 74 output tokens a chunk (docs/BENCHMARKS.md, "Contextualizing with Claude").
ESTIMATED_OUTPUT_TOKENS_PER_CHUNK = 74


def floor(planned: Sequence[Spooled], documents: dict[str, int], model_prices: str = "") -> float:
    """Each document read once at the on-demand input price (its contexts at the on-demand output price
    are added as the outputs come back: ``floor_output``)."""
    models = {p.record.document: p.record.model_id for p in planned}
    total = 0.0
    for key, tokens in documents.items():
        prices = prices_for(models.get(key, ""), model_prices)
        if prices is not None:
            total += tokens * prices.input / 1e6
    return total


def charge(
    summary: Summary,
    model_id: str,
    input_tokens: int,
    output_tokens: int,
    *,
    batch: bool,
    batch_prices: str = "",
    model_prices: str = "",
) -> None:
    """What an output line (or, estimating, a record) costs, at batch or on-demand prices. A model
    without batch prices is charged its on-demand prices (an upper bound, named in the summary)."""
    summary.input_tokens += input_tokens
    summary.output_tokens += output_tokens
    prices: BatchPrices | Prices | None = None
    if batch:
        prices = batch_prices_for(model_id, batch_prices)
        if prices is None and model_id not in summary.priced_on_demand:
            summary.priced_on_demand.append(model_id)
    if prices is None:
        prices = prices_for(model_id, model_prices)
    summary.cost_usd += (input_tokens * prices.input + output_tokens * prices.output) / 1e6


def floor_output(summary: Summary, model_id: str, output_tokens: int, model_prices: str = "") -> None:
    """The floor's second part: the contexts used, written at the on-demand output price."""
    summary.floor_usd += output_tokens * prices_for(model_id, model_prices).output / 1e6


def estimate(
    summary: Summary,
    planned: Sequence[Spooled],
    on_demand: list[int],
    *,
    batch_prices: str = "",
    model_prices: str = "",
) -> None:
    """The records' cost and floor before they are asked: ``ESTIMATED_OUTPUT_TOKENS_PER_CHUNK`` a chunk,
    the records in ``on_demand`` (indices into ``planned``) at on-demand prices."""
    asked_on_demand = set(on_demand)
    for index, spooled in enumerate(planned):
        record = spooled.record
        output = ESTIMATED_OUTPUT_TOKENS_PER_CHUNK * len(record.chunks)
        charge(
            summary,
            record.model_id,
            record.input_tokens,
            output,
            batch=index not in asked_on_demand,
            batch_prices=batch_prices,
            model_prices=model_prices,
        )
        floor_output(summary, record.model_id, output, model_prices)
