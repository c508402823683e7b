"""The custom resource that puts the app's tags on the OpenSearch Serverless collection, through the API.

``Tags`` is create-only on ``AWS::OpenSearchServerless::Collection`` (its CloudFormation schema) and the
collection's name is ours: a tag in its template, added after the first deploy, would make CloudFormation
replace the collection under the same name, and the update fail. So the stack keeps tags out of the
collection's template and gives them here (``TagResource`` changes no data): the tags every other resource
takes from ``Tags.of(app)``, for cost allocation on the most expensive resource of the stack.

- **Create / Update**: ``TagResource`` with the tags asked; on update, the keys this resource set before and
  no longer asks are removed (``UntagResource``). Tags set by hand under other keys are left alone.
- **Delete**: the keys this resource set are removed; a collection already gone (replaced, or deleted
  with the stack) is fine.

Physical id: the collection's ARN (a new collection is a new resource: CloudFormation deletes the old one's
tags, which are gone with it). Run by the index's Provider (``opensearch_index.on_event`` hands it on).
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)

GONE = {"ResourceNotFoundException"}


class TagError(Exception):
    """The collection's tags could not be set: the message says what and why."""


def _tags(properties: dict[str, Any] | None) -> dict[str, str]:
    """{key: value} from the rendered tags: ``[{"key": ..., "value": ...}]`` as CDK renders a collection's
    (``Key``/``Value`` accepted too); none when the app has no tags."""
    listed = (properties or {}).get("Tags") or []
    found = {}
    for tag in listed:
        if isinstance(tag, dict) and ("key" in tag or "Key" in tag):
            found[str(tag.get("key", tag.get("Key")))] = str(tag.get("value", tag.get("Value", "")))
    return found


def handle(event: dict[str, Any], client: Any) -> dict[str, Any]:
    from botocore.exceptions import ClientError

    kind = event["RequestType"]
    properties = event["ResourceProperties"]
    arn = str(properties["CollectionArn"])
    wanted = _tags(properties)
    before = _tags(event.get("OldResourceProperties")) if kind == "Update" else {}
    try:
        if kind == "Delete":
            physical = str(event.get("PhysicalResourceId", arn))
            if wanted and physical.startswith("arn:"):
                client.untag_resource(resourceArn=physical, tagKeys=sorted(wanted))
            return {"PhysicalResourceId": physical}
        dropped = sorted(set(before) - set(wanted))
        if dropped and event.get("PhysicalResourceId") == arn:
            client.untag_resource(resourceArn=arn, tagKeys=dropped)
        if wanted:
            client.tag_resource(
                resourceArn=arn, tags=[{"key": k, "value": v} for k, v in sorted(wanted.items())]
            )
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", "Unknown"))
        if kind == "Delete" and code in GONE:
            return {"PhysicalResourceId": str(event.get("PhysicalResourceId", arn))}
        message = exc.response.get("Error", {}).get("Message", "")
        raise TagError(f"collection {arn}: {exc.operation_name} failed: {code}: {message}") from None
    logger.info("collection tags %s", {"collection": arn, "set": sorted(wanted), "removed": dropped})
    return {"PhysicalResourceId": arn}


def on_event(event: dict[str, Any], _context: Any) -> dict[str, Any]:
    import boto3

    return handle(event, boto3.client("opensearchserverless"))
