"""Every example is whole: a handler module the function's asset can run (it imports nothing of
contextual_kb but the runtime), a README, and its CDK app on the public constructs."""

from __future__ import annotations

import pytest

from tests.examples import EXAMPLES, load
from tests.unit.test_architecture import imports, part_of

NAMES = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def test_there_are_the_two_examples() -> None:
    assert NAMES == ["path_metadata", "redact_emails"]


@pytest.mark.parametrize("name", NAMES)
def test_an_example_imports_only_the_runtime_and_is_a_lambda_handler(name: str) -> None:
    path = EXAMPLES / name / "handler.py"
    assert {part_of(module) for _, module in imports(path)} == {"runtime"}
    module = load(name)
    assert callable(module.handler) and callable(module.handler.step)  # transformation-made


@pytest.mark.parametrize("name", NAMES)
def test_an_example_has_its_readme_and_its_cdk_app(name: str) -> None:
    readme = (EXAMPLES / name / "README.md").read_text()
    assert f"tests/examples/test_{name}.py" in readme
    assert "handler.handler" in readme
    app = (EXAMPLES / name / "cdk" / "app.py").read_text()
    assert "from contextual_kb.cdk import ContextualKnowledgeBase" in app
    assert "handler_file=HANDLER" in app and 'parent.parent / "handler.py"' in app
