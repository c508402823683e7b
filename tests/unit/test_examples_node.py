"""The examples' CDK READMEs say what to do about jsii's Node 20 end-of-life box (printed on every synth as
Python byte strings): a supported Node, or the variable that silences it (the Makefile sets it too)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_each_example_that_synthesizes_says_how_to_silence_jsiis_node_box() -> None:
    readmes = sorted((ROOT / "examples").glob("*/cdk/README.md"))
    assert readmes
    for readme in readmes:
        text = readme.read_text(encoding="utf-8")
        assert "synth" in text
        assert "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20" in text, readme
        assert "Node 22 or later" in text, readme
    assert "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20" in (ROOT / "Makefile").read_text()
