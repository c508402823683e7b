"""The MCP server's pure parts: what it takes out of messages, and the filter a data-source choice makes."""

from __future__ import annotations

from contextual_kb.query.mcp_server import DATA_SOURCE_KEY, _with_data_sources, redact


def test_endpoints_and_account_ids_are_taken_out() -> None:
    line = (
        "cannot reach http://127.0.0.1:4566/knowledgebases: arn:aws:iam::123456789012:role/x "
        "(https://bedrock-agent.us-east-1.amazonaws.com)"
    )
    assert redact(line) == "cannot reach <endpoint>: arn:aws:iam::<account>:role/x (<endpoint>)"
    assert redact("k must be between 1 and 100") == "k must be between 1 and 100"
    assert redact("1234567890123 is not an account id") == "1234567890123 is not an account id"


def test_data_sources_become_a_filter_beside_the_callers() -> None:
    mine = {"equals": {"key": "team", "value": "payments"}}
    sources = {"in": {"key": DATA_SOURCE_KEY, "value": ["DS1"]}}
    assert _with_data_sources(None, None) is None
    assert _with_data_sources(mine, []) == mine
    assert _with_data_sources(None, ["DS1"]) == sources
    assert _with_data_sources(mine, ["DS1"]) == {"andAll": [mine, sources]}


def test_a_result_stays_within_max_characters_whatever_its_context_and_metadata() -> None:
    """The first result alone over the bound keeps its text's opening; a long context and large metadata
    (a user's own, a hierarchical parent's) are cut too, so the bound holds at its minimum, unicode and
    escapes included."""
    import json

    from contextual_kb.query.mcp_server import _bounded

    first = {
        "rank": 1,
        "source": "s3://docs/a.md",
        "context": "ç" * 3_000,
        "text": '😀"\\' * 2_000,
        "retrieval_score": 0.5,
        "rerank_score": 0.9,
        "metadata": {f"key{i}": "v" * 50 for i in range(100)},
    }
    kept, notices = _bounded([first, {**first, "rank": 2}], 1_000)
    (only,) = kept
    assert len(json.dumps(only, ensure_ascii=False)) <= 1_000
    assert only["rank"] == 1 and only["text"] and only["text_cut"] == len(first["text"])
    (notice,) = notices
    assert "\n" not in notice and "1 others left out" in notice
