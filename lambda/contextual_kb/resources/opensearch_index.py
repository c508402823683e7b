"""The custom resource that creates the Knowledge Base's vector index through the OpenSearch API.

``AWS::OpenSearchServerless::Index`` takes analyzers by built-in name only; ours needs filter definitions
(our stop list, ``word_delimiter_graph`` keeping the original, Snowball), so the index is created here, as
AWS's samples and the awslabs constructs do. Run by CDK's ``Provider`` framework (``on_event`` returns the
result or raises; the framework answers CloudFormation).

- **Create**: ``PUT /<index>`` with the body (settings and mappings, ``query/index_definition.py``),
  retried while the collection's data access policy propagates (403, "about a minute" in AWS's docs;
  bounded), then waits until ``GET /<index>`` answers, so the Knowledge Base is created against an index
  that is there. An index already there under this name is this body's (the name holds the body's hash).
- **Update**: the same name on the same endpoint: nothing to do. A new name (the analysis changed, which
  OpenSearch allows only at creation): the new index is created and returned as the new physical id;
  CloudFormation then deletes the old one. A new endpoint (the collection was replaced): the index is created
  there, under the same physical id (the old collection goes with its index).
- **Delete**: ``DELETE /<index>``; an index already gone is fine.

Requests are signed with SigV4 for ``aoss`` (botocore, which the Lambda runtime provides), with the
``x-amz-content-sha256`` header OpenSearch Serverless requires. Standard library otherwise.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SERVICE = "aoss"
# A data access policy may take "about a minute", rarely up to five, to be enforced (AWS's documentation).
PROPAGATION_SECONDS = 300.0
READY_SECONDS = 120.0
FIRST_WAIT = 2.0
MAX_WAIT = 15.0
# A network error (DNS not yet resolving a new collection's endpoint, a refused connection, a timeout) is
# answered as this status, and retried like a 503.
NETWORK_ERROR = 0
RETRIED = {NETWORK_ERROR, 403, 408, 429, 500, 502, 503, 504}


class IndexRequestError(Exception):
    """The OpenSearch API refused for good; the message says what and why."""


@dataclass
class Reply:
    status: int
    body: dict[str, Any]

    @property
    def error_type(self) -> str:
        error = self.body.get("error") if isinstance(self.body, dict) else None
        return str(error.get("type", "")) if isinstance(error, dict) else ""


class OpenSearch:
    """A few signed calls to one collection's endpoint."""

    def __init__(
        self,
        endpoint: str,
        region: str,
        *,
        credentials: Any = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.region = region
        self._credentials = credentials
        self.sleep = sleep
        self.clock = clock

    def _frozen_credentials(self) -> Any:
        if self._credentials is None:
            import botocore.session

            self._credentials = botocore.session.get_session().get_credentials()
        return self._credentials.get_frozen_credentials()

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Reply:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        data = json.dumps(body).encode() if body is not None else b""
        request = AWSRequest(
            method=method, url=self.endpoint + path, data=data, headers={"Content-Type": "application/json"}
        )
        request.headers["X-Amz-Content-SHA256"] = hashlib.sha256(data).hexdigest()
        SigV4Auth(self._frozen_credentials(), SERVICE, self.region).add_auth(request)
        sent = urllib.request.Request(
            request.url, data=data or None, method=method, headers=dict(request.headers.items())
        )
        try:
            with urllib.request.urlopen(sent, timeout=30) as response:  # the collection's endpoint
                return Reply(response.status, _json(response.read()))
        except urllib.error.HTTPError as error:
            return Reply(error.code, _json(error.read()))
        except (urllib.error.URLError, OSError) as error:  # TimeoutError and ConnectionError are OSErrors
            reason = getattr(error, "reason", error)
            return Reply(NETWORK_ERROR, {"error": {"type": "network_error", "reason": str(reason)}})

    def until(
        self, method: str, path: str, body: dict[str, Any] | None, *, seconds: float, ok: set[int]
    ) -> Reply:
        """The call, again after a growing wait while it answers a retryable status, for ``seconds``."""
        deadline = self.clock() + seconds
        wait = FIRST_WAIT
        while True:
            reply = self.call(method, path, body)
            if reply.status in ok or reply.status not in RETRIED | {404} or self.clock() + wait > deadline:
                return reply
            self.sleep(wait)
            wait = min(MAX_WAIT, wait * 2)


def create(client: OpenSearch, name: str, body: dict[str, Any]) -> None:
    reply = client.until("PUT", f"/{name}", body, seconds=PROPAGATION_SECONDS, ok={200})
    exists = reply.status == 400 and reply.error_type == "resource_already_exists_exception"
    if reply.status != 200 and not exists:
        raise IndexRequestError(f"creating index {name} failed: {_reason(reply)}")
    ready = client.until("GET", f"/{name}", None, seconds=READY_SECONDS, ok={200})
    if ready.status != 200:
        raise IndexRequestError(f"index {name} was created but does not answer: {_reason(ready)}")


def delete(client: OpenSearch, name: str) -> None:
    reply = client.until("DELETE", f"/{name}", None, seconds=PROPAGATION_SECONDS, ok={200, 404})
    if reply.status not in {200, 404}:
        raise IndexRequestError(f"deleting index {name} failed: {_reason(reply)}")


def handle(event: dict[str, Any], client: OpenSearch) -> dict[str, Any]:
    """The Provider framework's ``onEvent``: the physical id is the index's name."""
    kind = event["RequestType"]
    properties = event["ResourceProperties"]
    name = str(properties["IndexName"])
    if kind == "Delete":
        delete(client, event["PhysicalResourceId"])
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    if kind == "Update" and event.get("PhysicalResourceId") == name and not _moved(event):
        return {"PhysicalResourceId": name, "Data": {"IndexName": name}}
    create(client, name, json.loads(properties["Body"]))
    return {"PhysicalResourceId": name, "Data": {"IndexName": name}}


def _moved(event: dict[str, Any]) -> bool:
    """The collection's endpoint changed (a new collection): the index must be made there."""
    old = (event.get("OldResourceProperties") or {}).get("Endpoint")
    return old is not None and old != event["ResourceProperties"].get("Endpoint")


def on_event(event: dict[str, Any], _context: Any) -> dict[str, Any]:
    if event.get("ResourceType") == "Custom::CollectionTags":  # the same Provider: the collection's tags
        from contextual_kb.resources import collection_tags

        return collection_tags.on_event(event, _context)
    properties = event["ResourceProperties"]
    client = OpenSearch(str(properties["Endpoint"]), os.environ.get("AWS_REGION", ""))
    return handle(event, client)


def _json(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw or b"{}")
    except ValueError:
        return {"raw": raw[:300].decode("utf-8", "replace")}
    return value if isinstance(value, dict) else {"value": value}


def _reason(reply: Reply) -> str:
    error = reply.body.get("error")
    if isinstance(error, dict):
        return f"{reply.status} {error.get('type', '')}: {error.get('reason', '')}".strip()
    return f"{reply.status} {json.dumps(reply.body)[:300]}"
