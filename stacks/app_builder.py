"""The app: the stack from context settings, checked by cdk-nag (AwsSolutions) as a CDK validation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from contextual_kb.cdk.config import StackConfig, check_context_keys, load
from stacks.attach import AttachStack
from stacks.stack import ContextualKbStack

CDK_JSON = Path(__file__).resolve().parent.parent / "cdk.json"


def feature_flags() -> dict[str, Any]:
    """The CDK feature flags of cdk.json (AWS's recommended values, as `cdk init` writes them; among them
    server access logs delivered by bucket policy, not the legacy ACL). Read here too, so that tests and
    `cdk synth` build the same templates."""
    context = json.loads(CDK_JSON.read_text())["context"]
    return {name: value for name, value in context.items() if name.startswith("@aws-cdk")}


def build_app(
    context: dict[str, Any] | None = None, *, code: object | None = None
) -> tuple[cdk.App, ContextualKbStack | AttachStack]:
    # Context from the CDK CLI (cdk.json, -c) takes precedence over these, as CDK documents.
    app = cdk.App(context={**feature_flags(), **(context or {})})
    check_context_keys(app.node.get_all_context())  # a typo in a key fails here, not at the bill
    config = load({key: app.node.try_get_context(key) for key in _context_keys()})
    kind = AttachStack if config.attach else ContextualKbStack  # attach: to a Knowledge Base the user has
    stack = kind(app, config.stack_name, config=config, code=code)  # type: ignore[arg-type]
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack


def _context_keys() -> list[str]:
    return [f.alias for f in StackConfig.model_fields.values() if f.alias]
