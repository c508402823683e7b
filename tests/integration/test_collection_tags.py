"""The collection's tags, set through the API (``Custom::CollectionTags``): moto's OpenSearch Serverless for
the tags; botocore's Stubber for a collection already gone (moto answers an untag of a missing collection
with success, AWS with ResourceNotFoundException)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from contextual_kb.resources.collection_tags import TagError, handle
from contextual_kb.resources.opensearch_index import on_event

REGION = "us-east-1"


@pytest.fixture
def aoss() -> Iterator[tuple[Any, str]]:
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("opensearchserverless", region_name=REGION)
        # moto reads KmsARN from the encryption policy whatever AWSOwnedKey says
        policy = {"Rules": [{"ResourceType": "collection", "Resource": ["collection/ckb-kb"]}]}
        client.create_security_policy(
            name="ckb-enc",
            type="encryption",
            policy=json.dumps({**policy, "AWSOwnedKey": True, "KmsARN": ""}),
        )
        arn = client.create_collection(name="ckb-kb", type="VECTORSEARCH")["createCollectionDetail"]["arn"]
        yield client, arn


def tags_of(client: Any, arn: str) -> dict[str, str]:
    return {t["key"]: t["value"] for t in client.list_tags_for_resource(resourceArn=arn)["tags"]}


def event(request: str, arn: str, tags: dict[str, str], old: dict[str, str] | None = None) -> dict[str, Any]:
    def listed(values: dict[str, str]) -> list[dict[str, str]]:  # as CDK renders a collection's tags
        return [{"key": k, "value": v} for k, v in values.items()]

    found: dict[str, Any] = {
        "RequestType": request,
        "ResourceType": "Custom::CollectionTags",
        "ResourceProperties": {"CollectionArn": arn, "Tags": listed(tags)},
    }
    if request != "Create":
        found["PhysicalResourceId"] = arn
    if old is not None:
        found["OldResourceProperties"] = {"CollectionArn": arn, "Tags": listed(old)}
    return found


def test_tags_are_set_changed_and_removed_in_place_and_a_hand_set_tag_is_kept(aoss: tuple[Any, str]) -> None:
    """Created with the app's tags; a tag changed and one dropped (the app's tags edited after the deploy):
    the collection is the same, its tags follow; a tag someone set by hand stays; deleted: ours go."""
    client, arn = aoss
    assert handle(event("Create", arn, {"team": "search", "cost-center": "1234"}), client) == {
        "PhysicalResourceId": arn
    }
    assert tags_of(client, arn) == {"team": "search", "cost-center": "1234"}
    client.tag_resource(resourceArn=arn, tags=[{"key": "owner", "value": "by-hand"}])
    handle(event("Update", arn, {"team": "retrieval"}, old={"team": "search", "cost-center": "1234"}), client)
    assert tags_of(client, arn) == {"team": "retrieval", "owner": "by-hand"}
    handle(event("Delete", arn, {"team": "retrieval"}), client)
    assert tags_of(client, arn) == {"owner": "by-hand"}


def test_no_tags_is_no_call(aoss: tuple[Any, str]) -> None:
    client, arn = aoss
    with Stubber(client) as stub:  # any call would fail: none is queued
        assert handle(event("Create", arn, {}), client) == {"PhysicalResourceId": arn}
        stub.assert_no_pending_responses()


def test_the_index_providers_function_hands_the_event_on(aoss: tuple[Any, str]) -> None:
    """One Provider serves both custom resources: the index's entry point passes this one on."""
    client, arn = aoss
    on_event(event("Create", arn, {"team": "search"}), None)
    assert tags_of(client, arn) == {"team": "search"}


def test_a_collection_gone_is_fine_on_delete_and_a_refusal_is_one_line() -> None:
    client = boto3.client("opensearchserverless", region_name=REGION)
    arn = f"arn:aws:aoss:{REGION}:123456789012:collection/gone0000000000000000"
    with Stubber(client) as stub:
        stub.add_client_error("untag_resource", "ResourceNotFoundException", "not found", 404)
        assert handle(event("Delete", arn, {"team": "search"}), client) == {"PhysicalResourceId": arn}
        stub.add_client_error("tag_resource", "AccessDeniedException", "not allowed", 403)
        with pytest.raises(
            TagError, match="TagResource failed: AccessDeniedException: not allowed"
        ) as caught:
            handle(event("Create", arn, {"team": "search"}), client)
        assert "\n" not in str(caught.value)
