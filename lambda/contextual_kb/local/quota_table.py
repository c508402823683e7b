"""The shared model quota's DynamoDB table, made on an emulator (moto) for tests, benchmarks and fault runs:
the key the function uses (``pk``, a string) and the stack's billing mode (contextual_kb/cdk/function.py)."""

from __future__ import annotations

from typing import Any


def create_quota_table(dynamodb: Any, name: str) -> str:
    """Create the table ``name`` with ``dynamodb`` (a boto3 DynamoDB client); its name."""
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name
