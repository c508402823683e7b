"""deferred/costs.py: a run's cost and floor from the records and the prices alone, no AWS nor run state."""

from __future__ import annotations

import json

import pytest

from contextual_kb.deferred.costs import ESTIMATED_OUTPUT_TOKENS_PER_CHUNK, charge, estimate, floor
from contextual_kb.deferred.options import Summary
from contextual_kb.deferred.records import Planned
from contextual_kb.deferred.spool import Spooled

PRICES = json.dumps(
    {"input": 2.0, "output": 10.0, "cache_write_5m": 2.5, "cache_write_1h": 4.0, "cache_read": 0.2}
)
BATCH = json.dumps({"input": 1.0, "output": 5.0})


def spooled(document: str, chunks: int, tokens: int = 1000, model: str = "m") -> Spooled:
    return Spooled(Planned("r", document, model, 0, tuple(range(chunks)), b"", tokens), 0, 0)


def test_the_floor_reads_each_document_once_at_the_on_demand_input_price() -> None:
    planned = [spooled("a", 2), spooled("a", 3), spooled("b", 1)]
    assert floor(planned, {"a": 1_000_000, "b": 500_000}, PRICES) == pytest.approx(3.0)


def test_a_line_is_charged_at_batch_prices_and_on_demand_where_asked_so() -> None:
    summary = Summary()
    charge(summary, "m", 1_000_000, 100_000, batch=True, batch_prices=BATCH, model_prices=PRICES)
    assert summary.cost_usd == pytest.approx(1.5) and summary.priced_on_demand == []
    charge(summary, "m", 1_000_000, 0, batch=False, batch_prices=BATCH, model_prices=PRICES)
    assert summary.cost_usd == pytest.approx(3.5)
    assert (summary.input_tokens, summary.output_tokens) == (2_000_000, 100_000)


def test_a_model_without_batch_prices_is_charged_on_demand_and_named() -> None:
    summary = Summary()
    charge(summary, "no-such-model", 1_000_000, 0, batch=True, model_prices=PRICES)
    assert summary.cost_usd == pytest.approx(2.0) and summary.priced_on_demand == ["no-such-model"]


def test_the_estimate_charges_each_chunk_its_estimated_output_and_adds_it_to_the_floor() -> None:
    summary = Summary()
    planned = [spooled("a", 2, tokens=1_000_000), spooled("b", 1, tokens=0)]
    estimate(summary, planned, on_demand=[1], batch_prices=BATCH, model_prices=PRICES)
    output = ESTIMATED_OUTPUT_TOKENS_PER_CHUNK
    assert summary.output_tokens == 3 * output
    assert summary.cost_usd == pytest.approx(1.0 + (2 * output * 5.0 + output * 10.0) / 1e6)
    assert summary.floor_usd == pytest.approx(3 * output * 10.0 / 1e6)
