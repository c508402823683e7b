"""S3 Vectors' limit on a chunk's custom metadata (1 KB and 35 keys per vector, aws-facts.md): with
VECTOR_STORE=s3vectors, what the function returns for a chunk, merged with its file's metadata as the KB
merges it, stays within both whenever the user's own metadata does; OpenSearch keeps its larger budget."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextual_kb.runtime.context.base import ChunkContext, ContextStrategy, SourceDocument
from contextual_kb.runtime.deadline import Deadline
from contextual_kb.runtime.enrichment import (
    BODY_SEPARATOR,
    DEFAULT_LIMIT,
    S3_VECTORS_LIMIT,
    MetadataLimit,
    enrich,
    metadata_limit,
    valid_unicode,
)
from contextual_kb.runtime.models import ContentItem, parse_event
from contextual_kb.runtime.settings import Settings
from contextual_kb.runtime.transform import Transformation
from tests.support import MemoryStore, event, file_entry

BUCKET = "intermediate"
CJK = "本部分的文字一句接一句。検索拡張生成の文脈한국어문장"


def size(metadata: dict[str, Any]) -> int:
    """Bytes as the KB could count them at most: compact JSON, keys, values, quotes and separators."""
    return len(
        json.dumps(metadata, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    )


class FixedContexts(ContextStrategy):
    """A context of the test's choosing on every chunk (a model's may be this long, or longer)."""

    name = "claude"

    def __init__(self, text: str) -> None:
        self.text = text

    def contexts_for(
        self, document: SourceDocument, deadline: Deadline | None = None
    ) -> list[ChunkContext | None]:
        return [ChunkContext(self.text, "model")] * document.chunk_count


key_text = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=24).filter(
    lambda k: not k.startswith("ckb_")
)
value = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=300),
    st.text(alphabet=CJK, max_size=200),
    st.integers(),
    st.booleans(),
)
user_metadata = st.dictionaries(key_text, value, max_size=40)
context_text = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=1200),
    st.text(alphabet=CJK, min_size=1, max_size=800),
    st.just("x" * 795),
    st.just('"\\' * 400),  # escapes double in JSON
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    file_meta=user_metadata,
    chunk_meta=user_metadata,
    context=context_text,
    structure=st.booleans(),
    reprocessed=st.booleans(),
)
def test_s3_vectors_chunks_never_pass_1_kb_or_35_keys(
    file_meta: dict[str, Any], chunk_meta: dict[str, Any], context: str, structure: bool, reprocessed: bool
) -> None:
    if reprocessed:  # ckb sync --reprocess marks the document's metadata file: the file's metadata
        file_meta = {**file_meta, "ckb_reprocessed": "2026-11-25T06:00:00Z"}
    store = MemoryStore()
    body = "## Heading one\n\n" + "Words of a section, one sentence after another. " * 30
    store.put_json(
        BUCKET,
        "job/doc.md_1.JSON",
        {"fileContents": [{"contentBody": body, "contentType": "TEXT", "contentMetadata": chunk_meta}]},
    )
    raw = event(BUCKET, [file_entry("s3://src/doc.md", ["job/doc.md_1.JSON"], file_meta)])
    chosen = Settings(VECTOR_STORE="s3vectors", **({"CHUNKING": "structure"} if structure else {}))
    response, stats = Transformation(chosen, FixedContexts(context), store).run(parse_event(raw))

    users = {**file_meta, **chunk_meta}
    (produced,) = response.dump()["outputFiles"]
    items = [
        item
        for ref in produced["contentBatches"]
        for item in store.get_json(BUCKET, ref["key"])["fileContents"]
    ]
    assert items
    for item in items:
        merged = {**file_meta, **item.get("contentMetadata", {})}
        # Nothing of the user's is lost or changed.
        assert all(merged[k] == v for k, v in users.items())
        if S3_VECTORS_LIMIT.fits(users):
            assert size(merged) <= 1024, size(merged)
            assert len(merged) <= 35
        else:  # the user's alone is over: nothing of ours is added
            assert set(merged) == set(users)
        # The body carries the whole context whatever the metadata could take.
        assert item["contentBody"].startswith(valid_unicode(context) + BODY_SEPARATOR)
    assert stats.chunks_out == len(items)


def test_the_issues_case_fits_s3_vectors_and_is_counted() -> None:
    """A 795-byte context beside about 300 bytes of file metadata: 1,147 bytes before, within 1 KB now, the
    shortened copy counted; with OpenSearch the copy stays whole."""
    file_meta = {"team": "payments", "title": "Payments on-call runbook " + "x" * 200, "year": 2026}
    item = ContentItem.model_validate({"contentBody": "chunk", "contentType": "TEXT"})
    context = ChunkContext("c" * 795, "model")
    s3 = enrich(item, context, metadata_key="ckb_context", max_bytes=1024, file_metadata=file_meta,
                limit=metadata_limit("s3vectors"))  # fmt: skip
    merged = {**file_meta, **(s3.item.content_metadata or {})}
    assert size(merged) <= 1024 and s3.metadata_truncated
    assert s3.item.content_body == "c" * 795 + "\n\nchunk"
    opensearch = enrich(item, context, metadata_key="ckb_context", max_bytes=1024, file_metadata=file_meta,
                        limit=metadata_limit("opensearch"))  # fmt: skip
    assert opensearch.item.content_metadata == {"ckb_context": "c" * 795}
    assert not opensearch.metadata_truncated


def test_a_35th_key_is_never_ours() -> None:
    file_meta = {f"k{n}": n for n in range(35)}
    item = ContentItem.model_validate({"contentBody": "chunk", "contentType": "TEXT"})
    done = enrich(item, ChunkContext("ctx", "model"), metadata_key="ckb_context", max_bytes=1024,
                  file_metadata=file_meta, limit=S3_VECTORS_LIMIT)  # fmt: skip
    assert done.item.content_metadata is None and done.metadata_truncated


def test_the_store_names_the_limit() -> None:
    for name in ("s3vectors", "S3_VECTORS", "s3-vectors"):
        assert metadata_limit(name) == S3_VECTORS_LIMIT
    for name in ("opensearch", "OPENSEARCH_SERVERLESS", "", "pinecone"):
        assert metadata_limit(name) == DEFAULT_LIMIT
    assert MetadataLimit(10).fits({"a": "b"}) and not MetadataLimit(8).fits({"a": "bc"})
