"""Tests of examples/: each example's handler module, loaded from its file as Lambda loads it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from tests.conftest import ROOT

EXAMPLES = ROOT / "examples"


def load(name: str) -> ModuleType:
    """``examples/<name>/handler.py`` as a module of its own (Lambda's ``handler.handler``)."""
    path: Path = EXAMPLES / name / "handler.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}_handler", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
