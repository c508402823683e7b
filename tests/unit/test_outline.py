from __future__ import annotations

import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextual_kb.runtime.context.outline import outline


def labels_at(text: str, marker: str, path: str | None = None) -> list[str]:
    info = outline(text, path=path)
    return [s.label for s in info.path_at(text.index(marker))]


MARKDOWN = textwrap.dedent(
    """\
    # Guide

    Intro.

    ## Install

    ```bash
    # not a heading
    pip install thing
    ```

    ### On Linux

    MARKER-LINUX

    Setext Title
    ------------

    MARKER-SETEXT
    """
)


def test_markdown_heading_path_ignores_fenced_code() -> None:
    info = outline(MARKDOWN, path="docs/guide.md")
    assert info.kind == "markdown"
    assert info.title == "Guide"
    assert labels_at(MARKDOWN, "MARKER-LINUX") == ["Guide", "Install", "On Linux"]
    assert labels_at(MARKDOWN, "MARKER-SETEXT") == ["Guide", "Setext Title"]
    assert "not a heading" not in [s.label for s in info.sections]


PYTHON = textwrap.dedent(
    '''\
    # Copyright 2024 Example Corp. Licensed under the Apache License.
    """Token buckets for outbound calls. More text follows here."""

    import time


    class Bucket:
        """A bucket."""

        def take(
            self,
            n: int,
        ) -> bool:
            x = 1
            MARKER-TAKE
            return True

    def helper():
        MARKER-HELPER
    '''
)


def test_python_enclosing_definitions_and_docstring() -> None:
    info = outline(PYTHON)
    assert info.kind == "code"
    assert info.title.startswith("Token buckets for outbound calls.")  # the licence comment is skipped
    assert labels_at(PYTHON, "MARKER-TAKE") == ["class Bucket", "def take"]
    assert labels_at(PYTHON, "MARKER-HELPER") == ["def helper()"]
    assert info.names[:1] == ("Bucket",)
    assert "take" in info.names and "helper" in info.names


RUST = textwrap.dedent(
    """\
    //! Executor for differential fuzzing.
    //! It wraps two executors.
    use core::ptr;

    pub struct DiffExecutor<A, B> {
        primary: A,
    }

    impl<A, B> DiffExecutor<A, B> {
        pub fn new(primary: A) -> Self
        where
            A: Clone,
        {
            MARKER-NEW
        }
    }

    impl<A, B> Executor for DiffExecutor<A, B> {
        fn run_target(&mut self) -> Result<ExitKind, Error> {
            MARKER-RUN
        }
    }
    """
)


def test_rust_impls_where_clauses_and_module_doc() -> None:
    info = outline(RUST)
    assert info.title == "Executor for differential fuzzing. It wraps two executors."
    assert labels_at(RUST, "MARKER-NEW") == [
        "impl<A, B> DiffExecutor<A, B>",
        "pub fn new(primary: A) -> Self",
    ]
    assert labels_at(RUST, "MARKER-RUN")[-1].startswith("fn run_target(&mut self)")
    assert info.names[0] == "DiffExecutor"


C_AND_JAVA = {
    "c": (
        "/* SPDX-License-Identifier: MIT */\n/* Ring buffer helpers. */\n#include <stdio.h>\n\n"
        "static int\nring_push(struct ring *r, int v)\n{\n    if (r->full) {\n        MARKER\n    }\n"
        "    return 0;\n}\n\nint ring_pop(struct ring *r);\n"
    ),
    "java": (
        "package x;\n\n/** Parses configuration files. */\npublic class ConfigParser {\n"
        "    private final Map<String, String> values;\n\n"
        "    public Optional<String> get(String key) throws IOException {\n        MARKER\n    }\n}\n"
    ),
}


def test_c_function_with_brace_on_next_line_and_prototypes_ignored() -> None:
    text = C_AND_JAVA["c"]
    info = outline(text)
    assert info.title == "Ring buffer helpers."
    assert labels_at(text, "MARKER") == ["static int ring_push(struct ring *r, int v)"]
    assert "ring_pop" not in info.names  # a prototype is not a definition


def test_java_class_and_method() -> None:
    text = C_AND_JAVA["java"]
    info = outline(text, path="src/ConfigParser.java")
    assert info.title == "Parses configuration files."
    assert labels_at(text, "MARKER") == [
        "public class ConfigParser",
        "public Optional<String> get(String key) throws IOException",
    ]


CPP_CLASS = textwrap.dedent(
    """\
    namespace PO {
    enum class ErrCode { InvalidOption };

    class Error {
    public:
      Error(ErrCode C, std::string M) noexcept : Code(C), Message(std::move(M)) {}
      ~Error() {}
      ErrCode code() const noexcept { return Code; }

    private:
      ErrCode Code; // MARKER-MEMBER
    };

    Error::Error() : Code(ErrCode::InvalidOption) {
      Error(ErrCode::InvalidOption, "call, not a definition");
    }
    } // namespace PO
    """
)


def test_cpp_scoped_enum_constructors_and_access_labels() -> None:
    info = outline(CPP_CLASS, path="parser.h")
    assert "class" not in info.names and "ErrCode" in info.names  # `enum class ErrCode` is named ErrCode
    # `public:` at the class's own indentation does not end the class. (An unindented namespace body is not
    # followed: scopes are read from indentation.)
    assert labels_at(CPP_CLASS, "MARKER-MEMBER") == ["class Error"]
    constructor = CPP_CLASS.index("  Error(ErrCode C")
    member = CPP_CLASS.index("  ErrCode code()")
    assert info.defined_in(constructor, member) == ["Error", "~Error"]
    outside = CPP_CLASS.index("Error::Error()")
    assert info.defined_in(outside, len(CPP_CLASS)) == ["Error"]  # the call inside the body is not one
    assert labels_at(CPP_CLASS, '"call, not') == ["Error::Error() : Code(ErrCode::InvalidOption)"]


def test_a_call_of_a_class_name_is_not_a_constructor() -> None:
    text = "class Point {\n  int x;\n};\nvoid f() {\n  Point(1);\n  return;\n}\n"
    info = outline(text, path="p.cc")
    assert info.defined_in(0, len(text)) == ["Point", "f"]


def test_numbered_clauses_in_plain_text() -> None:
    parts = ["SERVICES AGREEMENT", "ARTICLE 2 Service Levels", "2.1 Availability. Up.", "2.2 Credits Due"]
    text = "\n\n".join([*parts, "MARKER\n"])
    info = outline(text, path="x.txt")
    assert info.kind == "text"
    assert info.title == "SERVICES AGREEMENT"
    assert labels_at(text, "MARKER") == ["ARTICLE 2 Service Levels", "2.2 Credits Due"]


def test_hash_comments_in_code_are_not_markdown_headings() -> None:
    text = "# compute totals\nimport os\n\ndef total(xs):\n    # sum them\n    return sum(xs)\n"
    assert outline(text).kind == "code"


def test_pathological_input_stays_fast_and_safe() -> None:
    # One 5 MB line of minified code and a deep run of unmatched braces: no hang, no error.
    outline("var a=function(b){return b};" * 180_000)
    outline("{\n" * 50_000 + "int f(int x) {\n" * 5_000)
    # Each `public: ... {}` line is a definition and not an access label: once this took minutes (quadratic).
    outline("class A {\n" + "public: A() {}\n" * 20_000 + "};\n", path="a.h")
    outline("")


LICENCE_LINES = [f"# Licensed line {n} of the Apache licence text, kept as a comment." for n in range(30)]


def test_code_without_an_extension_is_code_despite_long_comment_blocks() -> None:
    python = "\n".join(
        [
            *LICENCE_LINES,
            "from pyflink.table import StreamTableEnvironment",
            "env = StreamExecutionEnvironment.get_execution_environment()",
            "table = t_env.from_data_stream(",
            "    env.from_collection([",
            "        (0, 3),",
            "    ],",
            "))",
            "def test_run():",
            "    result = run(table)",
            "    assert result == 3",
        ]
    )
    assert outline(python).kind == "code"
    c_file = "\n".join(["/*", *(f" * Copyright line {n} of the licence." for n in range(40)), " */"])
    c_file += "\n#include <stdio.h>\nstatic int count;\nint main(void) {\n  return count;\n}\n"
    assert outline(c_file).kind == "code"


def test_markdown_and_prose_without_an_extension_stay_what_they_are() -> None:
    bullets = "\n".join(f"* step {n}: restart the service and check the dashboard" for n in range(20))
    markdown = f"# Runbook\n\nWhen the alarm fires, page the on-call engineer.\n\n## Steps\n\n{bullets}\n"
    assert outline(markdown).kind == "markdown"
    prose = "\n".join(
        [
            "MASTER SERVICES AGREEMENT",
            "The Supplier shall provide the Services described in each Statement of Work.",
            "Fees are payable within thirty days of the invoice date.",
            "Either party may terminate this Agreement for material breach.",
            "Notices shall be given in writing to the addresses set out above.",
            "This Agreement is governed by the laws of England and Wales.",
        ]
    )
    assert outline(prose).kind == "text"


def test_markdown_with_fenced_examples_and_bullets_is_markdown() -> None:
    fence = "```"
    example = "\n".join(["x = load()", "y = run(x)", "print(y)", "z = {", "}"])
    bullets = "\n".join(f"- option {n}" for n in range(8))
    markdown = (
        f"# Tool\n\nRun it like this:\n\n{fence}python\n{example}\n{fence}\n\n## Options\n\n{bullets}\n"
    )
    assert outline(markdown).kind == "markdown"


def test_only_bare_access_labels_stay_inside_a_scope() -> None:
    python = (
        "class Repo:\n    def is_public(self):\n        return True\n    private: bool = False  # MARKER\n"
    )
    assert labels_at(python, "# MARKER", path=None) == ["class Repo"]


def test_calls_of_a_type_are_not_constructors() -> None:
    cases = {
        "m.py": "class Config:\n    pass\n\ndef main():\n    Config(\n        name='a',\n    ).validate()\n"
        "    data = {'a': 1}\n",
        "items.py": "class Item:\n    pass\n\nITEMS = [\n    Item('a', {'x': 1}),\n"
        "    Item('b', {'x': 2}),\n]\n",
        "m.rs": "struct Meters(f64);\n\nimpl Meters {\n    fn double(self) -> Meters {\n"
        "        Meters(self.0 * 2.0)\n    }\n}\n",
        "e.c": "int exists(const char *path) {\n    struct stat st;\n    if (path != NULL &&\n"
        "        stat(path, &st) == 0) {\n        return 1;\n    }\n    return 0;\n}\n",
        "p.cc": "struct Point { int x, y; };\nvoid draw() {\n    Point({1, 2});\n}\n",
        "t.cc": "class Timer {\npublic:\n  Timer(std::function<void()> f);\n};\nvoid setup() {\n"
        "  Timer([] {\n    tick();\n  });\n}\n",
    }
    expected = {
        "m.py": ["class Config", "def main()"],
        "items.py": ["class Item"],
        "m.rs": ["struct Meters(f64);", "impl Meters", "fn double(self) -> Meters"],
        "e.c": ["int exists(const char *path)", "struct stat st;"],  # a declaration read as one, as before
        "p.cc": ["struct Point { int x, y; };", "void draw()"],
        "t.cc": ["class Timer", "void setup()"],  # a prototype is not a definition either
    }
    for path, text in cases.items():
        assert [s.label for s in outline(text, path=path).sections] == expected[path], path


def test_dunder_methods_are_not_listed_as_defined() -> None:
    text = "class A:\n    def __init__(self):\n        pass\n\n    def run(self):\n        pass\n"
    assert outline(text, path="a.py").defined_in(0, len(text)) == ["A", "run"]


def test_settings_and_open_sentences_without_an_extension_are_not_code() -> None:
    settings = "# Settings\n\nSet the following options:\n\ntimeout = 30\nretries = 5\nregion = eu-west-1\n\n"
    assert outline(settings + "Then restart the service.\n").kind == "markdown"
    ini = "; Payment gateway\n[gateway]\nhost = pay.example.com\nport = 443\n[retry]\ncount = 3\n"
    assert outline(ini).kind == "text"
    prose = (
        "The configuration file lists the following options (\nsee the table below for defaults):\n"
        "- timeout\n- retries\nThe report [\ndraft] is attached.\n"
    )
    assert outline(prose).kind == "text"


# --- the outline in linear time: the same answers as a scan of every section ---

LINE = st.sampled_from(
    [
        "# Title",
        "## Part",
        "### Detail",
        "#### Deep",
        "text line",
        "",
        "```",
        "Setext",
        "------",
        "class Thing:",
        "    def method(self):",
        "        return 1",
        "def helper():",
        "    pass",
        "}",
        "int f(int x) {",
        "ARTICLE 2 Terms",
        "2.1 Payment Due",
    ]
)


@given(st.lists(LINE, max_size=60), st.sampled_from([None, "a.md", "a.py", "a.c", "a.txt"]))
@settings(max_examples=300, deadline=None)
def test_path_at_equals_the_scan_of_every_section(lines: list[str], path: str | None) -> None:
    text = "\n".join(lines)
    info = outline(text, path=path)
    for offset in range(0, len(text) + 1, 3):
        scanned = sorted(
            (s for s in info.sections if s.start <= offset < s.end), key=lambda s: (s.depth, s.start)
        )
        assert info.path_at(offset) == scanned


def test_heading_sections_end_at_the_next_heading_of_their_level_or_above() -> None:
    text = "# A\nx\n## B\ny\n### C\nz\n## D\nw\n# E\n"
    ends = {s.label: text[s.start : s.end] for s in outline(text, path="t.md").sections}
    assert ends["A"] == "# A\nx\n## B\ny\n### C\nz\n## D\nw\n"
    assert ends["B"] == "## B\ny\n### C\nz\n"
    assert ends["C"] == "### C\nz\n" and ends["D"] == "## D\nw\n" and ends["E"] == "# E\n"


def test_an_outline_that_runs_out_of_time_stops() -> None:
    from contextual_kb.local.corpora import heading_dense_manual
    from contextual_kb.runtime.context.outline import OutlineTimeoutError

    text = heading_dense_manual(500_000)
    with pytest.raises(OutlineTimeoutError):
        outline(text, path="m.md", expired=lambda: True)
    assert outline(text, path="m.md", expired=lambda: False).sections
