"""The custom resource that creates the vector index through the OpenSearch API, against a local stand-in
that checks every SigV4 signature: bodies, paths, retries while the data access policy propagates, and
create, update and delete, each idempotent."""

from __future__ import annotations

import json
import urllib.error
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.credentials import Credentials

from contextual_kb.local.opensearch_standin import ACCESS_KEY, REGION, SECRET_KEY, OpenSearchStandIn
from contextual_kb.query.index_definition import index_body, index_name
from contextual_kb.resources import opensearch_index as opensearch_module
from contextual_kb.resources.opensearch_index import IndexRequestError, OpenSearch, handle
from tests.support import FakeClock


@pytest.fixture
def collection() -> Iterator[OpenSearchStandIn]:
    standin = OpenSearchStandIn().start()
    try:
        yield standin
    finally:
        standin.stop()


def client(standin: OpenSearchStandIn, clock: FakeClock, secret: str = SECRET_KEY) -> OpenSearch:
    return OpenSearch(
        standin.url, REGION, credentials=Credentials(ACCESS_KEY, secret), sleep=clock.sleep, clock=clock
    )


BODY = index_body(1024)
NAME = index_name(BODY)


def event(kind: str, name: str = NAME, physical: str | None = None, endpoint: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {
        "RequestType": kind,
        "ResourceProperties": {"Endpoint": endpoint, "IndexName": name, "Body": json.dumps(BODY)},
    }
    if physical is not None:
        out["PhysicalResourceId"] = physical
    return out


def test_create_retries_403_while_the_policy_propagates_then_waits_for_the_index(
    collection: OpenSearchStandIn,
) -> None:
    clock = FakeClock()
    collection.deny_next(4)
    result = handle(event("Create"), client(collection, clock))
    assert result == {"PhysicalResourceId": NAME, "Data": {"IndexName": NAME}}
    assert collection.indexes[NAME] == BODY  # the body as defined, analysis included
    calls = [(r.method, r.path) for r in collection.received]
    assert calls == [("PUT", f"/{NAME}")] * 5 + [("GET", f"/{NAME}")]
    assert all(r.signed for r in collection.received) and collection.bad_signatures == 0
    assert clock.slept == [2.0, 4.0, 8.0, 15.0]  # growing waits, bounded


def test_create_is_idempotent_and_update_only_acts_on_a_new_name(collection: OpenSearchStandIn) -> None:
    clock = FakeClock()
    opensearch = client(collection, clock)
    handle(event("Create"), opensearch)
    assert handle(event("Create"), opensearch)["PhysicalResourceId"] == NAME  # already there: this body's
    received = len(collection.received)
    assert handle(event("Update", physical=NAME), opensearch)["PhysicalResourceId"] == NAME
    assert len(collection.received) == received  # same name, same body: nothing to do
    changed = index_body(512)
    new_name = index_name(changed)
    assert new_name != NAME and new_name.startswith("contextual-kb-")
    update = event("Update", name=new_name, physical=NAME)
    update["ResourceProperties"]["Body"] = json.dumps(changed)
    assert handle(update, opensearch)["PhysicalResourceId"] == new_name  # CloudFormation deletes the old
    assert set(collection.indexes) == {NAME, new_name}
    handle(event("Delete", physical=NAME), opensearch)
    assert set(collection.indexes) == {new_name}


def test_delete_is_idempotent_and_retries_403(collection: OpenSearchStandIn) -> None:
    clock = FakeClock()
    opensearch = client(collection, clock)
    handle(event("Create"), opensearch)
    collection.deny_next(2)
    assert handle(event("Delete", physical=NAME), opensearch) == {"PhysicalResourceId": NAME}
    assert NAME not in collection.indexes
    assert handle(event("Delete", physical=NAME), opensearch) == {"PhysicalResourceId": NAME}  # gone: fine


def test_a_policy_that_never_allows_fails_in_one_message_after_a_bounded_wait(
    collection: OpenSearchStandIn,
) -> None:
    clock = FakeClock()
    collection.deny_next(1000)
    with pytest.raises(IndexRequestError, match=rf"creating index {NAME} failed: 403 security_exception"):
        handle(event("Create"), client(collection, clock))
    assert 250 <= clock.now <= 320  # about PROPAGATION_SECONDS, then it stops


def test_a_wrong_signature_is_refused_by_the_standin(collection: OpenSearchStandIn) -> None:
    """The stand-in really checks signatures: the same calls signed with another secret are refused."""
    clock = FakeClock()
    with pytest.raises(IndexRequestError, match="403"):
        handle(event("Create"), client(collection, clock, secret="not-the-secret"))
    assert collection.bad_signatures > 0 and not collection.indexes


def test_the_handler_reads_its_endpoint_and_region(
    collection: OpenSearchStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``on_event`` as Lambda calls it: credentials and region from the environment, as in the function."""
    from contextual_kb.resources import opensearch_index

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("AWS_REGION", REGION)
    result = opensearch_index.on_event(event("Create", endpoint=collection.url), None)
    assert result["PhysicalResourceId"] == NAME and NAME in collection.indexes


def test_a_new_endpoint_gets_the_index_under_the_same_name() -> None:
    """A replaced collection (a create-only setting changed): the Update carries a new Endpoint and the same
    index name; the index is created on the new collection, and the physical id stays (no Delete follows for
    an index the old collection takes with it)."""
    old, new = OpenSearchStandIn().start(), OpenSearchStandIn().start()
    try:
        clock = FakeClock()
        handle(event("Create", endpoint=old.url), client(old, clock))
        update = event("Update", physical=NAME, endpoint=new.url)
        update["OldResourceProperties"] = {**update["ResourceProperties"], "Endpoint": old.url}
        result = handle(update, client(new, clock))
        assert result["PhysicalResourceId"] == NAME
        assert new.indexes[NAME] == BODY
        same = event("Update", physical=NAME, endpoint=new.url)
        same["OldResourceProperties"] = dict(same["ResourceProperties"])
        received = len(new.received)
        handle(same, client(new, clock))
        assert len(new.received) == received  # same endpoint, same name: nothing to do
    finally:
        old.stop()
        new.stop()


def test_network_errors_on_a_new_endpoint_are_retried_then_said_in_one_line() -> None:
    """DNS that does not resolve yet, a refused connection: retried with growing waits like a 503, bounded,
    then one message naming the network error."""
    clock = FakeClock()
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    unreachable = OpenSearch(
        f"http://127.0.0.1:{port}", REGION, credentials=Credentials(ACCESS_KEY, SECRET_KEY),
        sleep=clock.sleep, clock=clock,
    )  # fmt: skip
    with pytest.raises(IndexRequestError, match="network_error"):
        handle(event("Create"), unreachable)
    assert len(clock.slept) > 3 and clock.now <= 300


def test_a_network_error_then_success_creates_the_index(collection: OpenSearchStandIn) -> None:
    clock = FakeClock()
    opensearch = client(collection, clock)
    real = opensearch.call
    failures = iter([True, True])

    def flaky(method: str, path: str, body: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
        if next(failures, False):
            raise_to = urllib.error.URLError("[Errno -2] Name or service not known")
            return opensearch_module.Reply(
                opensearch_module.NETWORK_ERROR, {"error": {"type": "network_error", "reason": str(raise_to)}}
            )
        return real(method, path, body)

    opensearch.call = flaky  # type: ignore[method-assign]
    assert handle(event("Create"), opensearch)["PhysicalResourceId"] == NAME
    assert collection.indexes[NAME] == BODY and clock.slept[:2] == [2.0, 4.0]
