from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from contextual_kb.runtime.context.base import ChunkContext
from contextual_kb.runtime.enrichment import KB_RESERVE_BYTES, METADATA_LIMIT_BYTES, cap_utf8, enrich
from contextual_kb.runtime.models import ContentItem


def item(body: str, content_type: str = "TEXT", metadata: dict | None = None) -> ContentItem:
    fields = {"contentBody": body, "contentType": content_type}
    if metadata is not None:
        fields["contentMetadata"] = metadata
    return ContentItem.model_validate(fields)


def test_context_is_prepended_and_original_kept_byte_for_byte() -> None:
    original = "  exact text\r\n with odd  spacing\t\n"
    done = enrich(
        item(original, metadata={"page": 3}),
        ChunkContext("ctx", "structural"),
        metadata_key="ckb_context",
        max_bytes=1024,
    )
    assert done.contextualized
    assert done.item.content_body == "ctx\n\n" + original
    assert done.item.content_metadata == {"page": 3, "ckb_context": "ctx"}


def test_non_text_and_missing_context_pass_through_untouched() -> None:
    image = item("iVBOR...", content_type="IMAGE")
    assert enrich(image, ChunkContext("ctx", "structural"), metadata_key="k", max_bytes=10).item is image
    text = item("body")
    assert enrich(text, None, metadata_key="k", max_bytes=10).item is text


def test_metadata_copy_is_capped_but_body_context_is_whole() -> None:
    context = "é" * 600  # 1200 bytes
    done = enrich(item("b"), ChunkContext(context, "structural"), metadata_key="k", max_bytes=100)
    assert done.metadata_truncated
    assert done.item.content_body == context + "\n\nb"
    assert len(done.item.content_metadata["k"].encode()) <= 100


def test_zero_bytes_disables_the_metadata_copy() -> None:
    done = enrich(
        item("b", metadata={"a": 1}), ChunkContext("c", "structural"), metadata_key="k", max_bytes=0
    )
    assert done.item.content_metadata == {"a": 1}


@given(st.text(max_size=300), st.integers(min_value=0, max_value=400))
def test_cap_utf8_never_exceeds_and_keeps_a_prefix(text: str, limit: int) -> None:
    capped, truncated = cap_utf8(text, limit)
    assert len(capped.encode("utf-8")) <= max(limit, 0)
    assert truncated == (len(text.encode("utf-8")) > limit)
    if not truncated:
        assert capped == text
    else:
        assert text.startswith(capped.removesuffix("…").rstrip()) or capped == ""


def test_the_users_metadata_wins_over_the_context_copy() -> None:
    context = ChunkContext("Document a.md: Payments guide", "structural")
    own = enrich(item("b", metadata={"k": "mine"}), context, metadata_key="k", max_bytes=1024)
    assert own.item.content_metadata == {"k": "mine"} and own.metadata_truncated
    in_file = enrich(item("b"), context, metadata_key="k", max_bytes=1024, file_metadata={"k": "file's"})
    assert in_file.item.content_metadata is None and in_file.metadata_truncated
    full = enrich(item("b", metadata={"pad": "x" * 3000}), context, metadata_key="k", max_bytes=1024)
    assert full.item.content_metadata == {"pad": "x" * 3000} and full.metadata_truncated
    for done in (own, in_file, full):  # the body always carries the whole context
        assert done.item.content_body == context.text + "\n\nb"


def test_the_context_copy_takes_only_the_room_left_under_the_limit() -> None:
    context = ChunkContext("c" * 500, "structural")
    done = enrich(
        item("b", metadata={"pad": "x" * 600}),
        context,
        metadata_key="k",
        max_bytes=1024,
        file_metadata={"pad2": "y" * 500},
    )
    merged = {"pad2": "y" * 500, **done.item.content_metadata}
    assert done.metadata_truncated and done.item.content_metadata["k"].endswith("…")
    size = len(json.dumps(merged, ensure_ascii=False, separators=(",", ":")).encode())
    assert size == METADATA_LIMIT_BYTES - KB_RESERVE_BYTES


def test_escapes_in_the_context_are_counted_against_the_limit() -> None:
    context = ChunkContext(
        'say "hi"\n\t\\ ' * 200, "structural"
    )  # each quote, newline, tab, backslash: 2 bytes
    done = enrich(item("b", metadata={"pad": "x" * 900}), context, metadata_key="k", max_bytes=1024)
    merged = done.item.content_metadata
    assert done.metadata_truncated and merged["k"]
    assert len(json.dumps(merged, ensure_ascii=False, separators=(",", ":")).encode()) <= (
        METADATA_LIMIT_BYTES - KB_RESERVE_BYTES
    )
