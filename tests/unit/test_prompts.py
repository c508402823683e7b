from __future__ import annotations

from typing import Any

import pytest

from contextual_kb.runtime.context.claude.prompts import (
    BEDROCK_ANTHROPIC_VERSION,
    DEFAULT_GROUPED_INSTRUCTION,
    DEFAULT_INSTRUCTION,
    SYSTEM,
    PromptSettings,
    chunk_request,
    grouped_request,
    parse_grouped,
)

HAIKU = "global.anthropic.claude-haiku-4-5-20251001-v1:0"
NEWER = "anthropic.claude-opus-5-v1:0"
DOCUMENT = "The whole document.\nIt has two lines."
CHUNK = "It has two lines."


def blocks(request: dict[str, Any]) -> list[dict[str, Any]]:
    [message] = request["messages"]
    assert message["role"] == "user"
    return message["content"]


# --- chunk_request ---


def test_chunk_request_puts_the_document_alone_in_a_cached_first_block() -> None:
    settings = PromptSettings(HAIKU, cache_ttl="1h")
    document_block, question_block = blocks(
        chunk_request(settings, document=DOCUMENT, chunk=CHUNK, cache=True)
    )
    assert document_block == {
        "type": "text",
        "text": f"<document>\n{DOCUMENT}\n</document>",
        "cache_control": {"type": "ephemeral", "ttl": "1h"},
    }
    assert "cache_control" not in question_block
    assert question_block["type"] == "text"
    assert f"<chunk>\n{CHUNK}\n</chunk>" in question_block["text"]
    assert question_block["text"].endswith(DEFAULT_INSTRUCTION)
    assert DOCUMENT not in question_block["text"]


def test_chunk_request_without_cache_has_no_cache_control_anywhere() -> None:
    request = chunk_request(PromptSettings(HAIKU), document=DOCUMENT, chunk=CHUNK, cache=False)
    assert all("cache_control" not in block for block in blocks(request))
    assert all("cache_control" not in block for block in request["system"])
    assert blocks(request)[0]["text"] == f"<document>\n{DOCUMENT}\n</document>"


def test_chunk_request_default_ttl_is_five_minutes() -> None:
    request = chunk_request(PromptSettings(HAIKU), document=DOCUMENT, chunk=CHUNK, cache=True)
    assert blocks(request)[0]["cache_control"] == {"type": "ephemeral", "ttl": "5m"}


def test_system_prompt_comes_first_and_carries_the_glossary() -> None:
    plain = chunk_request(PromptSettings(HAIKU), document=DOCUMENT, chunk=CHUNK, cache=True)
    assert plain["system"] == [{"type": "text", "text": SYSTEM}]

    glossary = "  KB: knowledge base\nRAG: retrieval-augmented generation  "
    request = chunk_request(
        PromptSettings(HAIKU, glossary=glossary), document=DOCUMENT, chunk=CHUNK, cache=True
    )
    [system] = request["system"]
    assert system["text"].startswith(SYSTEM)
    assert system["text"].endswith("KB: knowledge base\nRAG: retrieval-augmented generation")
    # The glossary lives in the system prompt only, not in the (per chunk) messages.
    assert all("KB: knowledge base" not in block["text"] for block in blocks(request))


def test_blank_glossary_is_no_glossary() -> None:
    assert PromptSettings(HAIKU, glossary=" \n\t ").system == SYSTEM


def test_extra_body_has_bedrock_version_and_zero_temperature_for_haiku_4_5() -> None:
    request = chunk_request(PromptSettings(HAIKU), document=DOCUMENT, chunk=CHUNK, cache=True)
    assert request["extra_body"] == {"anthropic_version": BEDROCK_ANTHROPIC_VERSION, "temperature": 0.0}
    assert BEDROCK_ANTHROPIC_VERSION == "bedrock-2023-05-31"
    assert "temperature" not in request


@pytest.mark.parametrize(
    "model_id",
    [
        "anthropic.claude-opus-4-20250514-v1:0",
        "us.anthropic.claude-sonnet-4-20250514-v1:0",
        "anthropic.claude-3-haiku-20240307-v1:0",
        "eu.anthropic.claude-sonnet-4-5-20250929-v1:0",
    ],
)
def test_known_older_models_get_zero_temperature(model_id: str) -> None:
    request = chunk_request(PromptSettings(model_id), document=DOCUMENT, chunk=CHUNK, cache=False)
    assert request["extra_body"]["temperature"] == 0.0


@pytest.mark.parametrize("model_id", [NEWER, "some.other-model-v1"])
def test_unknown_or_newer_models_get_no_temperature(model_id: str) -> None:
    for request in (
        chunk_request(PromptSettings(model_id), document=DOCUMENT, chunk=CHUNK, cache=True),
        grouped_request(
            PromptSettings(model_id), marked_document=DOCUMENT, numbers=[1], cache=True, code="c0ffee00"
        ),
    ):
        assert request["extra_body"] == {"anthropic_version": BEDROCK_ANTHROPIC_VERSION}
        assert "temperature" not in request
        assert request["model"] == model_id


def test_extra_body_is_not_shared_between_requests() -> None:
    settings = PromptSettings(NEWER)
    first = chunk_request(settings, document=DOCUMENT, chunk=CHUNK, cache=True)
    first["extra_body"]["temperature"] = 1.0
    second = chunk_request(settings, document=DOCUMENT, chunk=CHUNK, cache=True)
    assert "temperature" not in second["extra_body"]


def test_chunk_request_max_tokens_is_the_context_max_tokens() -> None:
    settings = PromptSettings(HAIKU, context_max_tokens=321)
    assert chunk_request(settings, document=DOCUMENT, chunk=CHUNK, cache=True)["max_tokens"] == 321


def test_custom_instruction_replaces_the_default() -> None:
    settings = PromptSettings(HAIKU, instruction="Say which section this chunk is in.")
    question = blocks(chunk_request(settings, document=DOCUMENT, chunk=CHUNK, cache=True))[1]["text"]
    assert question.endswith("Say which section this chunk is in.")
    assert DEFAULT_INSTRUCTION not in question
    grouped = blocks(
        grouped_request(settings, marked_document=DOCUMENT, numbers=[1, 2], cache=True, code="c0ffee00")
    )[1]
    assert "Say which section this chunk is in." in grouped["text"]
    assert DEFAULT_GROUPED_INSTRUCTION not in grouped["text"]


# --- grouped_request ---


def test_grouped_request_lists_the_numbers_and_caches_the_marked_document() -> None:
    marked = "⟪chunk 3 c0ffee00⟫Alpha text. ⟪chunk 4 c0ffee00⟫Beta text. ⟪chunk 7 c0ffee00⟫Gamma text."
    settings = PromptSettings(HAIKU)
    request = grouped_request(
        settings, marked_document=marked, numbers=[3, 4, 7], cache=True, code="c0ffee00"
    )
    document_block, question_block = blocks(request)
    assert document_block["text"] == f"<document>\n{marked}\n</document>"
    assert document_block["cache_control"] == {"type": "ephemeral", "ttl": "5m"}
    assert "Chunks: 3, 4, 7." in question_block["text"]
    assert DEFAULT_GROUPED_INSTRUCTION in question_block["text"]
    assert '<context chunk="N">' in question_block["text"]
    assert "⟪chunk N c0ffee00⟫" in question_block["text"]  # the model is told which markers are ours
    assert request["system"] == [{"type": "text", "text": SYSTEM}]
    uncached = grouped_request(settings, marked_document=marked, numbers=[3], cache=False, code="c0ffee00")
    assert "cache_control" not in blocks(uncached)[0]


def test_grouped_max_tokens_scales_with_the_number_of_chunks() -> None:
    settings = PromptSettings(HAIKU, context_max_tokens=100)

    def max_tokens(count: int) -> int:
        numbers = list(range(1, count + 1))
        return grouped_request(settings, marked_document="d", numbers=numbers, cache=False, code="c0ffee00")[
            "max_tokens"
        ]

    one, two, twelve = max_tokens(1), max_tokens(2), max_tokens(12)
    assert one >= 100
    assert two == 2 * one
    assert twelve == 12 * one
    # Room for each context plus its tags, but not wildly more.
    assert 12 * 100 <= twelve <= 12 * 200


# --- parse_grouped ---


def test_parse_grouped_reads_well_formed_answers() -> None:
    answer = '<context chunk="1">First context.</context>\n<context chunk="2">Second\ncontext.</context>'
    assert parse_grouped(answer, [1, 2]) == {1: "First context.", 2: "Second\ncontext."}


def test_parse_grouped_ignores_numbers_not_asked() -> None:
    answer = '<context chunk="1">One.</context><context chunk="9">Nine.</context>'
    assert parse_grouped(answer, [1, 2]) == {1: "One."}


def test_parse_grouped_drops_a_chunk_answered_twice() -> None:
    answer = (
        '<context chunk="1">One.</context><context chunk="2">Two.</context>'
        '<context chunk="1">Again.</context>'
    )
    assert parse_grouped(answer, [1, 2]) == {2: "Two."}


def test_parse_grouped_rejects_nested_tags() -> None:
    nested = '<context chunk="1">Outer <context chunk="2">inner</context> tail</context>'
    assert parse_grouped(nested, [1, 2]) == {}
    unclosed = '<context chunk="1">Never closed <context chunk="2">Two.</context>'
    assert parse_grouped(unclosed, [1, 2]) == {}


def test_parse_grouped_ignores_text_outside_the_elements() -> None:
    answer = (
        'Sure! Here are the contexts:\n<context chunk="1">One.</context>\nnoise\n'
        '<context chunk="2">Two.</context>\nHope this helps.'
    )
    assert parse_grouped(answer, [1, 2]) == {1: "One.", 2: "Two."}


def test_parse_grouped_leaves_missing_chunks_absent() -> None:
    result = parse_grouped('<context chunk="2">Two.</context>', [1, 2, 3])
    assert result == {2: "Two."}
    assert 1 not in result and 3 not in result
    assert parse_grouped("", [1]) == {}
    assert parse_grouped("no tags at all", [1]) == {}


def test_parse_grouped_needs_the_exact_form() -> None:
    # Wrong attribute quoting or name: not the strict form, not taken.
    answer = "<context chunk=1>One.</context><context n=\"2\">Two.</context><context chunk='3'>3</context>"
    assert parse_grouped(answer, [1, 2, 3]) == {}


# --- fingerprint ---


def test_fingerprint_is_stable_for_equal_settings() -> None:
    a = PromptSettings(HAIKU, instruction="x", glossary="g", context_max_tokens=200)
    b = PromptSettings(HAIKU, instruction="x", glossary="g", context_max_tokens=200)
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint("per_chunk", 16000) == b.fingerprint("per_chunk", 16000)
    assert len(a.fingerprint()) == 16
    int(a.fingerprint(), 16)  # hexadecimal


def test_fingerprint_changes_with_what_shapes_a_context() -> None:
    base = PromptSettings(HAIKU, instruction="x", glossary="g")
    variants = [
        PromptSettings("global.anthropic.claude-sonnet-4-5-20250929-v1:0", instruction="x", glossary="g"),
        PromptSettings(HAIKU, instruction="y", glossary="g"),
        PromptSettings(HAIKU, instruction="x", glossary="h"),
        PromptSettings(HAIKU, instruction="x", glossary=""),
        PromptSettings(HAIKU, instruction="x", glossary="g", context_max_tokens=161),
    ]
    prints = {base.fingerprint(), *(v.fingerprint() for v in variants)}
    assert len(prints) == 1 + len(variants)


def test_fingerprint_changes_with_extra_values() -> None:
    settings = PromptSettings(HAIKU)
    assert settings.fingerprint("per_chunk") != settings.fingerprint("grouped")
    assert settings.fingerprint("per_chunk", 16000) != settings.fingerprint("per_chunk", 8000)
    assert settings.fingerprint() != settings.fingerprint("per_chunk")
    assert settings.fingerprint(1) != settings.fingerprint("1")


def test_fingerprint_ignores_the_cache_ttl_and_glossary_edge_whitespace() -> None:
    # The TTL changes the cost, not the context; the glossary is sent stripped.
    assert (
        PromptSettings(HAIKU, cache_ttl="5m").fingerprint()
        == PromptSettings(HAIKU, cache_ttl="1h").fingerprint()
    )
    assert (
        PromptSettings(HAIKU, glossary="g").fingerprint()
        == PromptSettings(HAIKU, glossary=" g\n").fingerprint()
    )


def test_the_marker_code_is_the_documents_own_and_stable() -> None:
    from contextual_kb.runtime.context.claude.prompts import marker_code

    assert marker_code("a document") == marker_code("a document")
    assert marker_code("a document") != marker_code("a document.")
    assert len(marker_code("x" * 3_000_000)) == 8
    assert marker_code("lone \ud83d surrogate")  # hashed, not refused
