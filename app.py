#!/usr/bin/env python3
"""CDK entry point: `make synth`, `make deploy` (settings: cdk.json's context, or -c name=value)."""

import sys

from contextual_kb.cdk.config import ConfigError
from stacks.app_builder import build_app

try:
    app, _ = build_app()
except ConfigError as exc:  # a setting the stack cannot use: one line, no traceback
    sys.stderr.write(f"error: {exc}\n")
    sys.exit(1)
app.synth()
