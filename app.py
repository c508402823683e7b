#!/usr/bin/env python3
"""CDK entry point: `make synth`, `make deploy` (settings: cdk.json's context, or -c name=value)."""

from stacks.app_builder import build_app

app, _ = build_app()
app.synth()
