from __future__ import annotations

import pytest

from contextual_kb.runtime.settings import ConfigurationError, Settings


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.context_strategy == "claude"  # the deployed default
    assert settings.model_id == "global.anthropic.claude-haiku-4-5-20251001-v1:0"
    assert settings.context_mode == "per_chunk"
    assert settings.cache_ttl == "5m"
    assert settings.on_model_error == "fallback"
    assert settings.context_memory_prefix == "contextual-kb/contexts/"
    assert settings.output_prefix == "contextual-kb/output/"
    assert settings.context_metadata_key == "ckb_context"
    assert settings.context_metadata_max_bytes == 1024


def test_values_are_read_and_blank_means_default() -> None:
    settings = Settings.from_env(
        {"CONTEXT_STRATEGY": "none", "STRUCTURAL_MAX_CHARS": "300", "OUTPUT_PREFIX": ""}
    )
    assert settings.context_strategy == "none"
    assert settings.structural_max_chars == 300
    assert settings.output_prefix == "contextual-kb/output/"


def test_an_empty_memory_prefix_turns_remembering_off() -> None:
    """CONTEXT_MEMORY_PREFIX="" is a setting of its own (README), not "use the default"."""
    from contextual_kb.runtime.context.claude.engine import ClaudeStrategy

    settings = Settings.from_env({"CONTEXT_MEMORY_PREFIX": ""})
    assert settings.context_memory_prefix == ""
    assert not ClaudeStrategy(settings).remembering
    assert ClaudeStrategy(Settings.from_env({})).remembering


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CONTEXT_STRATEGY", "claude-3"),
        ("CONTEXT_MODE", "batch"),
        ("CACHE_TTL", "10m"),
        ("ON_MODEL_ERROR", "ignore"),
        ("MAX_CONCURRENCY", "0"),
        ("GROUP_SIZE", "1"),
        ("STRUCTURAL_MAX_CHARS", "ten"),
        ("CONTEXT_METADATA_MAX_BYTES", "9999"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        Settings.from_env({name: value})


def test_the_readme_documents_every_setting() -> None:
    from tests.conftest import ROOT

    readme = (ROOT / "docs" / "SETTINGS.md").read_text()
    missing = [f.alias for f in Settings.model_fields.values() if f.alias and f"`{f.alias}`" not in readme]
    assert missing == []


def test_a_quota_table_without_the_quota_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigurationError, match="MODEL_QUOTA_TABLE is set without the quota to share"):
        Settings.from_env({"MODEL_QUOTA_TABLE": "quota"})
    settings = Settings.from_env({"MODEL_QUOTA_TABLE": "quota", "MODEL_TOKENS_PER_MINUTE": "400000"})
    assert settings.model_quota_burst_seconds == 2.0
