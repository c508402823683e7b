"""Output keys: inside the directory the event's keys share, within S3's 1,024 bytes, the same on every call,
one per input key (and part)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextual_kb.runtime.output_keys import S3_MAX_KEY_BYTES, output_key, shared_directory

PREFIX = "contextual-kb/output/"
JOB = "aws/bedrock/knowledge_bases/KB/DS/JOB/"


@pytest.mark.parametrize(
    ("keys", "directory"),
    [
        ([], ""),
        (["a/b/c_1.JSON"], "a/b/"),
        (["a/b/c_1.JSON", "a/b/d_1.JSON"], "a/b/"),
        (["a/b/c", "a/bd/e"], "a/"),  # a shared head that is not a whole directory does not count
        (["x_1.JSON", "a/b_1.JSON"], ""),
        (["p/" + JOB + "f_1.JSON", "p/" + JOB + "g/h_2.JSON"], "p/" + JOB),
    ],
)
def test_the_shared_directory_is_the_longest_whole_one(keys: list[str], directory: str) -> None:
    assert shared_directory(keys) == directory


def test_an_output_key_is_the_shared_directory_then_our_prefix_then_the_rest() -> None:
    assert output_key(JOB + "docs_a.md_1.JSON", directory=JOB, prefix=PREFIX) == (
        JOB + "contextual-kb/output/docs_a.md_1.JSON"
    )
    assert output_key("a_1.JSON", directory="", prefix=PREFIX) == "contextual-kb/output/a_1.JSON"
    third = output_key(JOB + "a_1.JSON", directory=JOB, prefix=PREFIX, part=3)
    assert re.fullmatch(re.escape(JOB) + r"contextual-kb/output/a_1~part3-[0-9a-f]{8}\.JSON", third)
    # An input key named like a part (a document called "a_1~part3") does not take that part's output key:
    # it would have to hold the hash of the other input key.
    assert output_key(JOB + "a_1~part3.JSON", directory=JOB, prefix=PREFIX) != third
    assert output_key(JOB + "b_1.JSON", directory=JOB, prefix=PREFIX, part=3) != third.replace("a_1", "b_1")


def test_a_key_too_long_for_its_output_gets_a_shorter_one_that_keeps_its_head_and_tail() -> None:
    key = JOB + "ü" * 480 + "_12.JSON"  # 1,006 bytes: the KB can write it; with our prefix it would not fit
    out = output_key(key, directory=JOB, prefix=PREFIX)
    assert len(out.encode()) <= S3_MAX_KEY_BYTES
    assert out.startswith(JOB + PREFIX + "üüü") and out.endswith("üü_12.JSON")
    assert out == output_key(key, directory=JOB, prefix=PREFIX)  # the same on every call
    other = JOB + "ü" * 200 + "x" + "ü" * 279 + "_12.JSON"  # differs only in the middle
    assert output_key(other, directory=JOB, prefix=PREFIX) != out
    part = output_key(key, directory=JOB, prefix=PREFIX, part=2)
    assert len(part.encode()) <= S3_MAX_KEY_BYTES and re.search(r"_12~part2-[0-9a-f]{8}\.JSON$", part)


def test_a_shared_directory_too_long_for_our_prefix_keeps_the_outputs_inside_it() -> None:
    directory = "d/" * 495  # 990 bytes
    out = output_key(directory + "file_1.JSON", directory=directory, prefix=PREFIX)
    assert out.startswith(directory) and len(out.encode()) <= S3_MAX_KEY_BYTES


key_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/"), min_size=1)


@settings(max_examples=300, deadline=None)
@given(
    directory=st.sampled_from(["", JOB, "prefix/" + JOB]),
    names=st.lists(key_text.filter(lambda k: len(k.encode()) <= 900), min_size=1, max_size=5, unique=True),
    part=st.integers(min_value=1, max_value=30),
)
def test_output_keys_fit_stay_inside_and_never_collide(directory: str, names: list[str], part: int) -> None:
    keys = [directory + name + "_1.JSON" for name in names if len((directory + name).encode()) <= 1010]
    outs = [output_key(key, directory=directory, prefix=PREFIX, part=part) for key in keys]
    for out in outs:
        assert len(out.encode()) <= S3_MAX_KEY_BYTES
        assert out.startswith(directory)
    assert len(set(outs)) == len(outs)
