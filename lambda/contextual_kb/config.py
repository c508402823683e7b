"""Settings of the transformation, read from the environment once per cold start.

Every setting has a documented default (README, "Settings"). A bad value fails fast with a message that
names the variable, instead of surfacing mid-ingestion.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contextual_kb.errors import TransformationError

StrategyName = Literal["structural", "none"]


class ConfigurationError(TransformationError):
    """An environment variable holds a value the transformation cannot use."""


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    context_strategy: StrategyName = Field(default="structural", alias="CONTEXT_STRATEGY")
    # Upper bound on a structural context, in characters; it is prepended to every chunk.
    structural_max_chars: int = Field(default=480, ge=80, le=4000, alias="STRUCTURAL_MAX_CHARS")
    # Declared names listed in a structural context (types first); 0 leaves them out.
    structural_max_names: int = Field(default=6, ge=0, le=100, alias="STRUCTURAL_MAX_NAMES")
    # Output objects go under this prefix + the input key, so a retried call overwrites its own output.
    output_prefix: str = Field(default="contextual-kb/output/", alias="OUTPUT_PREFIX")
    # Chunk metadata key that carries the context alone (the query side shows it apart from the chunk).
    context_metadata_key: str = Field(default="ckb_context", min_length=1, alias="CONTEXT_METADATA_KEY")
    # S3 Vectors caps filterable metadata at 2 KB per vector, shared with the KB's own keys: keep ours small.
    context_metadata_max_bytes: int = Field(default=1024, ge=0, le=2048, alias="CONTEXT_METADATA_MAX_BYTES")
    # Shortest run of identical text that counts as the overlap between two consecutive chunks.
    min_overlap_chars: int = Field(default=8, ge=1, le=1000, alias="MIN_OVERLAP_CHARS")
    # Validated batch objects kept in memory between validation and processing, in bytes of JSON.
    prefetch_max_bytes: int = Field(default=256 * 1024 * 1024, ge=0, alias="PREFETCH_MAX_BYTES")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        names = {f.alias for f in cls.model_fields.values() if f.alias}
        values = {name: env[name] for name in names if env.get(name, "") != ""}
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            name = str(first["loc"][0]) if first.get("loc") else "?"
            raise ConfigurationError(
                f"environment variable {name}={values.get(name)!r}: {first['msg']}"
            ) from exc
