"""This example's CDK app: the whole contextual Knowledge Base (contextual_kb.cdk.ContextualKnowledgeBase)
with ../handler.py as the transformation function's handler. Settings as the repository's stack takes them
(`-c name=value`, docs/SETTINGS.md). `cdk synth` or `cdk deploy` here, after
`pip install ".[cdk]" cdk-nag` in the repository (not yet on PyPI: the README's "Install")."""

from pathlib import Path

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from contextual_kb.cdk import ContextualKnowledgeBase, setting_names

HANDLER = Path(__file__).resolve().parent.parent / "handler.py"

app = cdk.App()
stack = cdk.Stack(app, "PathMetadataExample")
settings = {key: app.node.try_get_context(key) for key in setting_names()}
ContextualKnowledgeBase(stack, "Default", settings=settings, handler_file=HANDLER)
cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()
