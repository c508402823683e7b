"""`ckb upload` leaves out what a `.gitignore` in the folder ignores and the usual byte-code and build
outputs, each said on a `skipped:` line like hidden files, unless `--include-ignored`; its small lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contextual_kb.query import uploads
from tests.integration.test_kb_cli import Clients, aws, keys, s3, upload  # noqa: F401 - fixtures


def _tree(docs: Path) -> None:
    for name, text in {
        "README.md": "# docs",
        "src/app.py": "print(1)",
        "src/__pycache__/app.cpython-311.pyc": "bytecode",
        "src/stray.pyc": "bytecode",
        "build/lib/app.py": "a copy",
        "dist/pkg-1.0.tar.gz": "an archive",
        "pkg.egg-info/PKG-INFO": "metadata",
        "web/node_modules/left-pad/index.js": "module.exports = 1",
        "notes/draft.md": "ignored by the .gitignore",
        "notes/keep.md": "re-included by a deeper .gitignore",
        "logs/run.log": "ignored by pattern",
        "docs/build.md": "a file named build is not a build folder",
    }.items():
        path = docs / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (docs / ".gitignore").write_text("# comment\n*.log\nnotes/*\n")
    (docs / "notes" / ".gitignore").write_text("!keep.md\n")


def test_upload_skips_what_gitignore_ignores_and_build_outputs_unless_asked(
    aws: Clients,  # noqa: F811 - the fixture
    s3: Any,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    _tree(docs)
    result = upload(aws, s3, str(docs))
    assert result.exit_code == 0, result.output
    assert keys(s3) == ["README.md", "docs/build.md", "notes/keep.md", "src/app.py"]
    skipped = sorted(line for line in result.stderr.splitlines() if line.startswith("skipped:"))
    assert (
        f"skipped: {docs / 'logs' / 'run.log'}: ignored by .gitignore (--include-ignored uploads it)"
        in skipped
    )
    assert (
        f"skipped: {docs / 'notes' / 'draft.md'}: ignored by .gitignore (--include-ignored uploads it)"
        in skipped
    )
    for output in ("build", "dist", "pkg.egg-info", "src/__pycache__", "src/stray.pyc", "web/node_modules"):
        assert (
            f"skipped: {docs / output}: a build or byte-code output (--include-ignored uploads it)" in skipped
        )
    result = upload(aws, s3, str(docs), "--include-ignored")
    assert result.exit_code == 0, result.output
    assert "build/lib/app.py" in keys(s3) and "notes/draft.md" in keys(s3) and "src/stray.pyc" in keys(s3)


def test_a_gitignore_applies_below_its_own_folder_only(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "a").mkdir(parents=True)
    (docs / "b").mkdir()
    (docs / "a" / ".gitignore").write_text("*.md\n")
    (docs / "a" / "x.md").write_text("x")
    (docs / "b" / "y.md").write_text("y")
    found = uploads.plan([docs], "")
    assert [f.key for f in found.files] == ["b/y.md"]


def test_a_gitignore_line_git_cannot_read_is_skipped_as_git_does(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / ".gitignore").write_text("!\n\\\n*.log\n")
    (docs / "a.log").write_text("x")
    (docs / "a.md").write_text("x")
    assert [f.key for f in uploads.plan([docs], "").files] == ["a.md"]


def test_an_empty_folder_is_one_line_that_points_at_nothing(aws: Clients, s3: Any, tmp_path: Path) -> None:  # noqa: F811 - the fixtures
    (tmp_path / "empty").mkdir()
    result = upload(aws, s3, str(tmp_path / "empty"))
    assert result.exit_code == 1
    assert result.stderr == "error: nothing to upload: the paths given hold no files to upload\n"


def test_more_warnings_are_counted_in_the_plural(aws: Clients, s3: Any, tmp_path: Path) -> None:  # noqa: F811 - the fixtures
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(23):
        (docs / f"f{i:02}.bin").write_text("x")
    result = upload(aws, s3, str(docs))
    assert result.exit_code == 0, result.output
    assert "... and 3 more warnings\n" in result.stderr


def test_the_upload_summary_is_its_first_line(aws: Clients, s3: Any, tmp_path: Path) -> None:  # noqa: F811 - the fixtures
    (tmp_path / "a.md").write_text("# A")
    result = upload(aws, s3, str(tmp_path / "a.md"))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("uploaded 1 file(s) to s3://"), repr(result.stdout)
