"""The app: the stack from context settings, checked by cdk-nag (AwsSolutions) as a CDK validation."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from stacks.config import load
from stacks.nag import acknowledge
from stacks.stack import ContextualKbStack

# CDK behaviours this app relies on, whatever cdk.json holds.
FEATURE_FLAGS = {
    # Server access logs delivered through a bucket policy, not the legacy LogDeliveryWrite ACL.
    "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy": True,
}


def build_app(
    context: dict[str, Any] | None = None, *, code: object | None = None
) -> tuple[cdk.App, ContextualKbStack]:
    app = cdk.App(context={**FEATURE_FLAGS, **(context or {})})
    config = load({key: app.node.try_get_context(key) for key in _context_keys()})
    stack = ContextualKbStack(app, config.stack_name, config=config, code=code)  # type: ignore[arg-type]
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    acknowledge(stack)
    return app, stack


def _context_keys() -> list[str]:
    from stacks.config import StackConfig

    return [f.alias for f in StackConfig.model_fields.values() if f.alias]
