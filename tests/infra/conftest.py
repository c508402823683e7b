"""One synth per vector store for the whole session (jsii starts slowly), bundling skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

STORES = ("opensearch", "s3vectors")
NO_BUNDLING = {"aws:cdk:bundling-stacks": []}


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Per vector store: the assertions Template, the template as a dict and its file (for cfn-lint)."""
    from aws_cdk.assertions import Template

    from stacks.app_builder import build_app

    out: dict[str, Any] = {}
    folder = tmp_path_factory.mktemp("templates")
    for store in STORES:
        app, stack = build_app({**NO_BUNDLING, "vectorStore": store})
        assembly = app.synth()  # runs the cdk-nag validation: an unacknowledged finding raises here
        template = Template.from_stack(stack)
        as_json = template.to_json()
        path = folder / f"{store}.template.json"
        path.write_text(json.dumps(as_json))
        out[store] = {
            "template": template,
            "json": as_json,
            "path": path,
            "stack": stack,
            "assembly": Path(assembly.directory),
        }
    yield out


def resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def only(template: dict[str, Any], kind: str) -> dict[str, Any]:
    found = list(resources(template, kind).values())
    assert len(found) == 1, f"{len(found)} {kind}"
    return found[0]["Properties"]


def flat(value: Any) -> str:
    """The value as JSON text, to look for a name anywhere inside it."""
    return json.dumps(value)


def as_list(value: Any) -> list[Any]:
    """IAM fields hold one value or a list of them."""
    return value if isinstance(value, list) else [value]


def write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value))


def transform_function(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The transformation function (the stack has others: the index's custom resource and its framework)."""
    (found,) = [
        (k, v) for k, v in resources(template, "AWS::Lambda::Function").items() if "TransformFunction" in k
    ]
    return found[0], found[1]["Properties"]


# Templates synthesized this session, by context and tags: modules that need the same variant share it.
_SYNTHESIZED: dict[str, tuple[Path, dict[str, Any]]] = {}


def synth_variants(
    folder: Path, variants: dict[str, dict[str, Any]], *, tags: dict[str, str] | None = None
) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Each named context synthesized (cdk-nag runs in synth: an unacknowledged finding raises), its
    template written to ``folder`` for cfn-lint and returned as a dict; ``tags`` added to the whole app as
    a user's ``Tags.of(app).add(...)`` would. A context another module synthesized already is reused."""
    from aws_cdk import Tags
    from aws_cdk.assertions import Template

    from stacks.app_builder import build_app

    out = {}
    for name, context in variants.items():
        key = json.dumps([context, tags or {}], sort_keys=True)
        if key not in _SYNTHESIZED:
            app, stack = build_app({**NO_BUNDLING, **context})
            for tag, value in (tags or {}).items():
                Tags.of(app).add(tag, value)
            app.synth()
            template = Template.from_stack(stack).to_json()
            path = folder / f"{name}.json"
            path.write_text(json.dumps(template))
            _SYNTHESIZED[key] = (path, template)
        out[name] = _SYNTHESIZED[key]
    return out


def cfn_lint(paths: list[Path]) -> subprocess.CompletedProcess[str]:
    """cfn-lint (the venv's) on the templates; W3005 (a DependsOn already implied) ignored."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), "--ignore-checks", "W3005", "--", *map(str, paths)],
        capture_output=True,
        text=True,
        check=False,
    )
