from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contextual_kb.local.kb_chunking import fixed_size_chunks
from contextual_kb.runtime.context.base import ChunkContext, SourceDocument
from contextual_kb.runtime.context.passthrough import PassThroughStrategy
from contextual_kb.runtime.context.structural import NAME, StructuralStrategy
from contextual_kb.runtime.documents import assemble
from tests.conftest import EVENTS


def document(text: str, path: str | None, max_tokens: int = 60) -> tuple[SourceDocument, list[str]]:
    chunks = fixed_size_chunks(text, max_tokens=max_tokens, overlap_percentage=20)
    return SourceDocument("s3://src/" + (path or "x"), path, {}, assemble(chunks)), chunks


def test_code_context_names_file_purpose_place_and_declarations() -> None:
    text = (EVENTS / "documents" / "token_bucket.py").read_text()
    doc, chunks = document(text, "src/ratelimit/token_bucket.py")
    contexts = StructuralStrategy().contexts_for(doc)
    assert len(contexts) == len(chunks)
    index = next(i for i, c in enumerate(chunks) if "elapsed = max" in c and "def _refill" not in c)
    context = contexts[index]
    assert context is not None and context.source == "structural"
    lines = context.text.splitlines()
    assert lines[0].startswith("File src/ratelimit/token_bucket.py: Rate limiting for outbound API calls")
    assert lines[1] == "Within: class TokenBucket › def _refill(self, now: float) -> None"
    # try_acquire starts in this chunk, after the end of _refill: the chunk's own definition.
    assert "def try_acquire" in chunks[index]
    assert lines[2] == "Defines: try_acquire"
    assert (
        lines[3]
        == "Declares: RateLimitExceeded, BucketState, TokenBucket, KeyedLimiter, _refill, try_acquire"
    )


def test_defines_lists_only_what_starts_in_the_chunk_and_yields_to_the_budget() -> None:
    text = "class Store:\n    def get(self):\n        return 1\n\n    def put(self, v):\n        self.v = v\n"
    split = text.index("    def put")
    doc = SourceDocument("s3://src/x", "store.py", {}, assemble([text[:split], text[split:]]))
    first, second = StructuralStrategy().contexts_for(doc)
    assert first is not None and second is not None
    assert "Defines: Store, get" in first.text.splitlines()
    assert "Defines: put" in second.text.splitlines()
    assert "Within: class Store" in second.text.splitlines()
    # With little room, the chunk's own names come before the file's.
    expected = "File store.py\nWithin: class Store\nDefines: put"
    tight = StructuralStrategy(max_chars=len(expected) + 3)
    assert tight.contexts_for(doc)[1] == ChunkContext(expected, NAME)


def test_markdown_context_gives_the_heading_path_without_repeating_the_title() -> None:
    text = (EVENTS / "documents" / "payments-runbook.md").read_text()
    doc, chunks = document(text, "docs/payments-runbook.md")
    contexts = StructuralStrategy().contexts_for(doc)
    index = next(
        i for i, c in enumerate(chunks) if c.startswith("Do not fail over") or "Do not fail over" in c
    )
    assert contexts[index] is not None
    assert contexts[index].text.splitlines() == [
        "Document docs/payments-runbook.md: Payments Service Runbook",
        "Section: Alarms › Ledger replication lag",
    ]


def test_a_blank_chunk_gets_no_context_and_none_strategy_gives_none() -> None:
    doc = SourceDocument("s", None, {}, assemble(["# T\n\ntext", "   ", ""]))
    contexts = StructuralStrategy().contexts_for(doc)
    assert contexts[1] is None and contexts[2] is None
    assert PassThroughStrategy().contexts_for(doc) == [None, None, None]


@settings(max_examples=40, deadline=None)
@given(
    text=st.text(alphabet=st.characters(codec="utf-8"), max_size=3000),
    max_chars=st.integers(min_value=80, max_value=600),
    path=st.one_of(st.none(), st.sampled_from(["a.py", "b.md", "c.txt", "dir/" + "x" * 300 + ".rs"])),
)
def test_contexts_are_bounded_deterministic_and_one_per_chunk(
    text: str, max_chars: int, path: str | None
) -> None:
    doc, chunks = document(text, path, max_tokens=25)
    strategy = StructuralStrategy(max_chars=max_chars)
    first = strategy.contexts_for(doc)
    assert first == strategy.contexts_for(doc)
    assert len(first) == len(chunks)
    for context in first:
        assert context is None or 0 < len(context.text) <= max_chars
