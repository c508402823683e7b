"""A local stand-in for an OpenSearch Serverless collection's index API, to test the index custom resource.

On 127.0.0.1: ``PUT /<index>`` (400 ``resource_already_exists_exception`` when it exists), ``GET /<index>``
(404 ``index_not_found_exception`` when not), ``DELETE /<index>``. Every request's SigV4 signature is
checked as the service would (the ``aoss`` service, the region, a known access key: the signature is
computed again from the method, path, headers and body, and ``x-amz-content-sha256`` must be the body's
hash); a bad one is answered 403 and counted. ``deny_next`` answers the next requests 403, as a data access
policy that has not propagated yet does. Everything received is recorded.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from contextual_kb.local.loopback import LoopbackServer

ACCESS_KEY = "AKIALOCALOPENSEARCH"
SECRET_KEY = "local-secret"
REGION = "us-east-1"


@dataclass
class Received:
    method: str
    path: str
    body: Any
    signed: bool


@dataclass
class OpenSearchStandIn:
    # The key the requests must be signed with (an emulator's functions sign with its own).
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    indexes: dict[str, Any] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    bad_signatures: int = 0
    _deny: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: LoopbackServer | None = None

    def deny_next(self, count: int) -> None:
        with self._lock:
            self._deny += count

    @property
    def url(self) -> str:
        assert self._server is not None
        return self._server.url

    def start(self) -> OpenSearchStandIn:
        owner = self

        class Handler(_Handler):
            standin = owner

        self._server = LoopbackServer(Handler, name="opensearch-standin")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def answer(self, method: str, path: str, body: Any, signed: bool) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.received.append(Received(method, path, body, signed))
            if not signed:
                self.bad_signatures += 1
                return 403, _error("security_exception", "the request signature does not match")
            if self._deny:
                self._deny -= 1
                return 403, _error("security_exception", "no permissions for this index")
            name = path.strip("/").split("/")[0]
            if method == "PUT":
                if name in self.indexes:
                    return 400, _error("resource_already_exists_exception", f"index [{name}] already exists")
                self.indexes[name] = body
                return 200, {"acknowledged": True, "index": name}
            if name not in self.indexes:
                return 404, _error("index_not_found_exception", f"no such index [{name}]")
            if method == "GET":
                return 200, {name: self.indexes[name]}
            if method == "DELETE":
                del self.indexes[name]
                return 200, {"acknowledged": True}
            return 405, _error("method_not_allowed", method)


def _error(kind: str, reason: str) -> dict[str, Any]:
    return {"error": {"type": kind, "reason": reason}, "status": 0}


def signature_matches(
    method: str,
    url: str,
    headers: dict[str, str],
    body: bytes,
    *,
    access_key: str = ACCESS_KEY,
    secret_key: str = SECRET_KEY,
) -> bool:
    """Signed for ``aoss`` with the stand-in's key: the signature computed again from what arrived."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    lower = {k.lower(): v for k, v in headers.items()}
    authorization = lower.get("authorization", "")
    if not authorization.startswith("AWS4-HMAC-SHA256 ") or f"Credential={access_key}/" not in authorization:
        return False
    if lower.get("x-amz-content-sha256") != hashlib.sha256(body).hexdigest():
        return False
    fields = dict(part.strip().split("=", 1) for part in authorization[len("AWS4-HMAC-SHA256 ") :].split(","))
    scope = fields["Credential"].split("/")
    if scope[2:4] != [REGION, "aoss"]:
        return False
    signed = fields["SignedHeaders"].split(";")
    request = AWSRequest(
        method=method, url=url, data=body, headers={h: lower[h] for h in signed if h in lower}
    )
    request.context["timestamp"] = lower.get("x-amz-date", "")
    token = lower.get("x-amz-security-token")
    auth = SigV4Auth(Credentials(access_key, secret_key, token), "aoss", REGION)
    canonical = auth.canonical_request(request)
    expected = auth.signature(auth.string_to_sign(request, canonical), request)
    return expected == fields["Signature"]


class _Handler(BaseHTTPRequestHandler):
    standin: OpenSearchStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        host = self.headers.get("Host", "")
        standin = self.standin
        signed = signature_matches(
            self.command,
            f"http://{host}{self.path}",
            dict(self.headers.items()),
            raw,
            access_key=standin.access_key,
            secret_key=standin.secret_key,
        )
        body = json.loads(raw) if raw else None
        status, reply = self.standin.answer(self.command, self.path, body, signed)
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()
