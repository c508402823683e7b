"""Settings of the transformation, read from the environment once per cold start.

Every setting has a documented default (docs/SETTINGS.md). A bad value fails fast with a message that
names the variable, instead of surfacing mid-ingestion.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from contextual_kb.runtime.errors import TransformationError

StrategyName = Literal["claude", "structural", "none"]
ContextMode = Literal["per_chunk", "grouped", "auto", "published"]
CacheTtl = Literal["5m", "1h"]
OnModelError = Literal["fallback", "fail"]
Chunking = Literal["kb", "structure"]
ContextDefer = Literal["never", "fallbacks", "always"]

# Claude Haiku 4.5 through the global cross-region inference profile: list price, any commercial region.
DEFAULT_MODEL_ID = "global.anthropic.claude-haiku-4-5-20251001-v1:0"


# Variables whose empty value is itself a setting: CONTEXT_MEMORY_PREFIX="" turns remembering off.
EMPTY_IS_A_VALUE = frozenset({"CONTEXT_MEMORY_PREFIX"})


class ConfigurationError(TransformationError):
    """An environment variable holds a value the transformation cannot use."""


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    context_strategy: StrategyName = Field(default="claude", alias="CONTEXT_STRATEGY")
    # Upper bound on a structural context, in characters; it is prepended to every chunk.
    structural_max_chars: int = Field(default=480, ge=80, le=4000, alias="STRUCTURAL_MAX_CHARS")
    # Names listed in a structural context: up to this many defined in the chunk, and as many declared by the
    # file (types first); 0 leaves both out.
    structural_max_names: int = Field(default=6, ge=0, le=100, alias="STRUCTURAL_MAX_NAMES")
    # kb: keep the Knowledge Base's chunks. structure: chunk each document by its own structure (for a data
    # source whose chunking strategy is NONE, which hands the function whole documents).
    chunking: Chunking = Field(default="kb", alias="CHUNKING")
    # CHUNKING=structure: the largest chunk, in tokens (words and punctuation marks), overlap included.
    chunk_max_tokens: int = Field(default=300, ge=20, le=8192, alias="CHUNK_MAX_TOKENS")
    # CHUNKING=structure: tokens each chunk repeats from the end of the one before it (at most half the size).
    chunk_overlap_tokens: int = Field(default=0, ge=0, le=4096, alias="CHUNK_OVERLAP_TOKENS")
    # Outputs go under the directory the event's batch keys share, then this prefix, then the rest of the
    # input key: inside the KB's intermediate location, and a retried call overwrites its own output.
    output_prefix: str = Field(default="contextual-kb/output/", alias="OUTPUT_PREFIX")
    # Chunk metadata key that carries the context alone (the query side shows it apart from the chunk).
    context_metadata_key: str = Field(default="ckb_context", min_length=1, alias="CONTEXT_METADATA_KEY")
    # S3 Vectors caps filterable metadata at 2 KB per vector, shared with the KB's own keys: keep ours small.
    context_metadata_max_bytes: int = Field(default=1024, ge=0, le=2048, alias="CONTEXT_METADATA_MAX_BYTES")
    # The Knowledge Base's vector store (the stack sets it): with s3vectors (or S3_VECTORS) a chunk's whole
    # custom metadata, the user's and ours, stays within 1 KB and 35 keys, as the KB requires there.
    vector_store: str = Field(default="", max_length=64, alias="VECTOR_STORE")
    # Shortest run of identical text that counts as the overlap between two consecutive chunks.
    min_overlap_chars: int = Field(default=8, ge=1, le=1000, alias="MIN_OVERLAP_CHARS")
    # Validated batch objects kept in memory between validation and processing, in bytes of JSON.
    # Small: every file's kept batches wait in memory until that file's turn; a re-read is one pinned GET.
    prefetch_max_bytes: int = Field(default=8 * 1024 * 1024, ge=0, alias="PREFETCH_MAX_BYTES")
    # Attempts per S3 request (the SDK's standard retry mode: backoff with jitter, up to 20 s a wait).
    s3_max_attempts: int = Field(default=8, ge=1, le=20, alias="S3_MAX_ATTEMPTS")
    # S3 reads (while validating) and writes of batch objects at once.
    s3_max_concurrency: int = Field(default=16, ge=1, le=64, alias="S3_MAX_CONCURRENCY")

    # --- the claude strategy (docs/SETTINGS.md) ---
    model_id: str = Field(default=DEFAULT_MODEL_ID, min_length=1, alias="MODEL_ID")
    # Region of the Bedrock runtime endpoint; empty means the SDK's environment (AWS_REGION).
    model_region: str = Field(default="", alias="MODEL_REGION")
    context_mode: ContextMode = Field(default="per_chunk", alias="CONTEXT_MODE")
    # Chunks whose contexts one grouped call asks for.
    group_size: int = Field(default=20, ge=2, le=64, alias="GROUP_SIZE")
    cache_ttl: CacheTtl = Field(default="5m", alias="CACHE_TTL")
    # Minimum cacheable prompt prefix in tokens; 0 means the model's documented minimum (facts table).
    min_cache_tokens: int = Field(default=0, ge=0, alias="MIN_CACHE_TOKENS")
    # max_tokens of one context; a grouped call gets this times the number of chunks it asks for.
    context_max_tokens: int = Field(default=160, ge=16, le=2048, alias="CONTEXT_MAX_TOKENS")
    # Longest context kept, in characters; a longer answer is cut at a word boundary.
    context_max_chars: int = Field(default=800, ge=80, le=8000, alias="CONTEXT_MAX_CHARS")
    # The instruction after the chunk; empty means Anthropic's (prompts.DEFAULT_INSTRUCTION).
    context_instruction: str = Field(default="", alias="CONTEXT_INSTRUCTION")
    # Domain vocabulary for the model, sent once per document inside the cached prefix.
    glossary: str = Field(default="", max_length=20000, alias="GLOSSARY")
    # Documents longer than this (estimated tokens) are sent as their opening plus a window around the chunk.
    max_document_tokens: int = Field(default=100_000, ge=2000, le=900_000, alias="MAX_DOCUMENT_TOKENS")
    window_tokens: int = Field(default=16_000, ge=1000, alias="WINDOW_TOKENS")
    opening_tokens: int = Field(default=2000, ge=0, alias="OPENING_TOKENS")
    max_concurrency: int = Field(default=32, ge=1, le=256, alias="MAX_CONCURRENCY")
    # One quota shared by every invocation (runtime/context/claude/shared_quota.py): a DynamoDB table, and
    # what of the account's quota for the model this ingestion may use. Off while the table is empty.
    model_quota_table: str = Field(default="", alias="MODEL_QUOTA_TABLE")
    model_requests_per_minute: int = Field(default=0, ge=0, alias="MODEL_REQUESTS_PER_MINUTE")
    model_tokens_per_minute: int = Field(default=0, ge=0, alias="MODEL_TOKENS_PER_MINUTE")
    # Seconds of the quota sent at once, as calls arrive with jitter; carved out of the minute (any 60 s hold
    # at most the quota: shared_quota.QuotaRate), so the turns use 60 / (60 + this) of it sustained: 96.8% at
    # 2 s, whose margin absorbed what 0.5 s did not (calls reaching Bedrock late, replies settling more than
    # booked): 0 refusals under a clock and a sliding minute where 0.5 s had 20-41 under a sliding minute
    # (bench/fleet.py, 4 invocations, 2026-12-06).
    model_quota_burst_seconds: float = Field(default=2.0, gt=0, le=60, alias="MODEL_QUOTA_BURST_SECONDS")
    # Quota tokens one output token takes (Bedrock's burndown rate); 0: the model table's (pricing.py).
    model_output_burndown: int = Field(default=0, ge=0, le=15, alias="MODEL_OUTPUT_BURNDOWN")
    # Seconds one HTTP attempt may take, and the SDK's retries (backoff with jitter) for 429, 5xx, timeouts.
    model_timeout_seconds: float = Field(default=60.0, gt=0, le=900, alias="MODEL_TIMEOUT_SECONDS")
    model_max_retries: int = Field(default=4, ge=0, le=10, alias="MODEL_MAX_RETRIES")
    # Consecutive failed calls that open the breaker, and how long it stays open before one probe call.
    breaker_threshold: int = Field(default=5, ge=1, alias="BREAKER_THRESHOLD")
    breaker_cooldown_seconds: float = Field(default=20.0, ge=0, alias="BREAKER_COOLDOWN_SECONDS")
    # Kept back from the Lambda's remaining time as a margin, besides the estimated time of what is left to do
    # once the model stops (structural contexts, S3 reads and writes): measured as the invocation goes.
    deadline_reserve_seconds: float = Field(default=10.0, ge=1, alias="DEADLINE_RESERVE_SECONDS")
    on_model_error: OnModelError = Field(default="fallback", alias="ON_MODEL_ERROR")
    # Contexts remembered in the intermediate bucket under this prefix; empty turns remembering off.
    context_memory_prefix: str = Field(default="contextual-kb/contexts/", alias="CONTEXT_MEMORY_PREFIX")
    # JSON price overrides in USD per million tokens, e.g. {"input": 1, "output": 5, "cache_read": 0.1}.
    model_prices: str = Field(default="", alias="MODEL_PRICES")
    # What is left without a model context is recorded for `ckb contextualize` (docs/DEFERRED.md):
    # never; fallbacks (what fell back); always (no model call here at all: structural contexts
    # now, every document pending, its contexts made later by Bedrock batch inference).
    context_defer: ContextDefer = Field(default="fallbacks", alias="CONTEXT_DEFER")
    # Pending documents are recorded in the intermediate bucket under this prefix.
    pending_prefix: str = Field(default="contextual-kb/pending/", min_length=1, alias="PENDING_PREFIX")

    @model_validator(mode="after")
    def _deferred_contexts_are_remembered(self) -> Settings:
        if self.context_defer == "always" and not self.context_memory_prefix:
            raise ValueError(
                "CONTEXT_DEFER=always with CONTEXT_MEMORY_PREFIX empty: contexts made later are found "
                "through the remembered contexts; set a prefix, or CONTEXT_DEFER=fallbacks"
            )
        return self

    @model_validator(mode="after")
    def _shared_quota_is_given(self) -> Settings:
        if self.model_quota_table and not (self.model_requests_per_minute or self.model_tokens_per_minute):
            raise ValueError(
                "MODEL_QUOTA_TABLE is set without the quota to share: set MODEL_REQUESTS_PER_MINUTE or "
                "MODEL_TOKENS_PER_MINUTE or both (a little under the account's quotas for the model, Service "
                "Quotas)"
            )
        return self

    @model_validator(mode="after")
    def _overlap_within_size(self) -> Settings:
        if self.chunk_overlap_tokens > self.chunk_max_tokens // 2:
            raise ValueError(
                f"CHUNK_OVERLAP_TOKENS={self.chunk_overlap_tokens} must be at most half of "
                f"CHUNK_MAX_TOKENS={self.chunk_max_tokens}"
            )
        return self

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """An empty variable means the default (a console leaves empty values behind), except where the
        empty value is a setting of its own (``EMPTY_IS_A_VALUE``)."""
        env = os.environ if environ is None else environ
        names = {f.alias for f in cls.model_fields.values() if f.alias}
        values = {
            name: env[name] for name in names if name in env and (env[name] != "" or name in EMPTY_IS_A_VALUE)
        }
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            if not first.get("loc"):  # a rule between variables: its message names them
                raise ConfigurationError(str(first["msg"]).removeprefix("Value error, ")) from exc
            name = str(first["loc"][0])
            raise ConfigurationError(
                f"environment variable {name}={values.get(name)!r}: {first['msg']}"
            ) from exc
