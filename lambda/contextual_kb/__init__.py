"""Contextual retrieval for Amazon Bedrock Knowledge Bases.

The transformation Lambda's entry point is :func:`contextual_kb.handler.lambda_handler`.
"""

__version__ = "0.1.0"
