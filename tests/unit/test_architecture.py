"""The layout draws the architecture, and this keeps it true: each part of ``contextual_kb`` imports only the
parts below it. Read from the source (every ``import``, at the top of a module or inside a function), so
it cannot rot.

    runtime      what the Lambda runs (handler, contract, transformation, context strategies, the Claude
                 engine): imports nothing else of the package; the function's asset holds it alone
    query        retrieve and rerank, answering, ingestion jobs, stack lookup, the MCP server: runtime
    local        stand-ins (the local Knowledge Base too), local S3, KB-style staging, fault harness,
                 samples: runtime
    evaluation   metrics, lexical analysis, offline and deployed runs, dense retrieval: runtime, query, local
    deferred     contexts made later (pending documents, batch inference, ckb contextualize): runtime, query,
                 local
    cli          the ``ckb`` commands, rendering, terminal safety: anything
    resources    the stack's custom resources (the index, attaching a data source): nothing else; each its
                 own small function's asset
    cdk          the constructs (``contextual_kb.cdk``: the transformation and the whole stack's parts, for
                 the user's CDK app and ours): runtime (the function's settings), query (the ingestion logs'
                 query); never imported by the parts above, and the runtime's asset never holds it
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "lambda" / "contextual_kb"
PARTS = ("runtime", "resources", "query", "local", "evaluation", "deferred", "cli", "cdk")
ALLOWED = {
    "runtime": {"runtime"},
    "resources": {"resources"},
    "query": {"runtime", "query"},
    "local": {"runtime", "local"},
    "evaluation": {"runtime", "query", "local", "evaluation"},
    "deferred": {"runtime", "query", "local", "deferred"},
    "cli": set(PARTS) - {"cdk"},
    "cdk": {"runtime", "query", "cdk"},
}


def part_of(module: str) -> str:
    """``contextual_kb.runtime.context.base`` -> ``runtime``; the package itself -> ``""``."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else ""


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of ``contextual_kb`` in ``path``; ``from contextual_kb.x import y``
    counts ``contextual_kb.x.y`` (y may be a module)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("contextual_kb")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("contextual_kb"):
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def test_every_module_is_in_one_part() -> None:
    stray = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    assert stray == [], "a module outside the parts: put it where it belongs"
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(
        PARTS
    )


def test_each_part_imports_only_the_parts_below_it() -> None:
    broken = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        mine = part_of(".".join(relative.parts))
        for line, module in imports(path):
            theirs = part_of(module)
            if theirs and mine and theirs not in ALLOWED[mine]:
                broken.append(f"{path.relative_to(ROOT)}:{line}: {mine} imports {module}")
    assert broken == []


def test_the_context_strategies_do_not_reach_back_into_the_transformation() -> None:
    """Strategies are given documents and a deadline; the handler and the transformation call them, never
    the other way round."""
    broken = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sorted((PACKAGE / "runtime" / "context").rglob("*.py"))
        for line, module in imports(path)
        if module.startswith(("contextual_kb.runtime.handler", "contextual_kb.runtime.transform"))
    ]
    assert broken == []


def test_the_rule_would_catch_a_break() -> None:
    """The check itself: a runtime module importing the command line is found."""
    assert part_of("contextual_kb.cli.main.app") == "cli"
    assert "cli" not in ALLOWED["runtime"]
    sample = ast.parse("def f():\n    from contextual_kb.cli.main import app\n")
    (node,) = [n for n in ast.walk(sample) if isinstance(n, ast.ImportFrom)]
    assert node.module == "contextual_kb.cli.main"
