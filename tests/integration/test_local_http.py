"""The HTTP base the two local servers share (local/http_base.py), attacked over a raw socket: a body length
that is not a number, a negative one, one over the limit; each answered in one JSON line and the connection
closed, with the server still serving; every answer says it comes from a local stand-in."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from contextual_kb.evaluation.lexical import ANALYZERS
from contextual_kb.local.bedrock_standin import BedrockStandIn
from contextual_kb.local.http_base import JsonHandler
from contextual_kb.local.knowledge_base import DataSourceSpec, KnowledgeBaseSpec, LocalKnowledgeBase

SIGNED = "Authorization: AWS4-HMAC-SHA256 Credential=x/20260101/us-east-1/bedrock/aws4_request\r\n"


@pytest.fixture(params=["knowledge-base", "bedrock-runtime"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, int, str]]:
    """(host, port, a POST path the server answers) of each local server."""
    if request.param == "knowledge-base":
        spec = KnowledgeBaseSpec("KB00000001", [DataSourceSpec("DS00000001", "b", "i")])
        kb = LocalKnowledgeBase([spec], analyzer=ANALYZERS["index"], s3=lambda: None, invoke=None).start()
        assert kb._server is not None
        yield (*kb._server.address, "/knowledgebases/KB00000001/retrieve")
        kb.stop()
    else:
        standin = BedrockStandIn().start()
        assert standin._server is not None
        yield (*standin._server.address, "/model/m/invoke")
        standin.stop()


def exchange(host: str, port: int, request: bytes) -> tuple[int, dict[str, str], dict[str, Any], bytes]:
    """(status, headers, JSON body, what followed the body before the server closed) of one raw request."""
    with socket.create_connection((host, port), timeout=10) as connection:
        connection.sendall(request)
        data = b""
        while True:
            part = connection.recv(65536)  # the server closes the connection: recv returns b"", no timeout
            if not part:
                break
            data += part
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers["content-length"])
    return int(lines[0].split()[1]), headers, json.loads(rest[:length]), rest[length:]


@pytest.mark.parametrize(
    ("length", "status", "says"),
    [
        ("abc", 400, "is not a number"),
        ("-1", 400, "is negative"),
        (str(10**12), 413, "at most"),
        ("chunked", 411, "not chunked"),  # its chunks would otherwise be read as the next request
    ],
)
def test_a_body_length_it_cannot_read_is_answered_and_the_connection_closed(
    server: tuple[str, int, str], length: str, status: int, says: str
) -> None:
    host, port, path = server
    header = f"Content-Length: {length}" if length != "chunked" else "Transfer-Encoding: chunked"
    request = f"POST {path} HTTP/1.1\r\nHost: x\r\n{SIGNED}{header}\r\n\r\n{{}}".encode()
    got, headers, body, _ = exchange(host, port, request)
    assert got == status and body["__type"] == "ValidationException" and says in body["message"]
    assert headers["connection"] == "close"
    # The server lives on.
    probe = f"GET /nothing-here HTTP/1.1\r\nHost: x\r\n{SIGNED}Connection: close\r\n\r\n".encode()
    assert exchange(host, port, probe)[0] == 404


def test_every_answer_says_it_is_a_local_standin(server: tuple[str, int, str]) -> None:
    host, port, path = server
    for request in (
        f"GET /nothing-here HTTP/1.1\r\nHost: x\r\n{SIGNED}Connection: close\r\n\r\n",
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}",  # unsigned
    ):
        status, headers, _, _ = exchange(host, port, request.encode())
        assert status in {403, 404}
        assert headers["x-ckb-local"] in {"knowledge-base", "bedrock-runtime"}


@pytest.mark.parametrize(
    ("headers", "status", "says"),
    [
        # Two lengths that disagree: which one a proxy in front used is unknowable (request smuggling).
        ("Content-Length: 2\r\nContent-Length: 40", 400, "more than one Content-Length"),
        ("Content-Length: 2\r\nContent-Length: 2", 400, "more than one Content-Length"),
        ("Content-Length: 1_0", 400, "is not a number"),  # int() reads it as 10
        ("Content-Length: +2", 400, "is not a number"),
        # The first Transfer-Encoding said identity, the second chunked: the chunks were left in the stream.
        (
            "Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\nContent-Length: 2",
            411,
            "not chunked",
        ),
    ],
)
def test_a_length_that_is_not_one_plain_number_is_refused(
    server: tuple[str, int, str], headers: str, status: int, says: str
) -> None:
    host, port, path = server
    request = f"POST {path} HTTP/1.1\r\nHost: x\r\n{SIGNED}{headers}\r\n\r\n{{}}".encode()
    got, answer, body, _ = exchange(host, port, request)
    assert got == status and body["__type"] == "ValidationException" and says in body["message"], body
    assert answer["connection"] == "close"


def test_a_body_nested_deeper_than_the_parser_recurses_is_a_400(server: tuple[str, int, str]) -> None:
    """It was a RecursionError: a 500 InternalServerException, as if the stand-in had a bug."""
    host, port, path = server
    deep = b"[" * 100_000 + b"]" * 100_000
    request = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\n{SIGNED}Content-Length: {len(deep)}\r\nConnection: close\r\n\r\n"
    ).encode() + deep
    got, _, body, _ = exchange(host, port, request)
    assert got == 400 and body["__type"] == "ValidationException", body


def test_a_body_that_stops_short_is_answered_and_the_connection_closed(
    server: tuple[str, int, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that announces 100 bytes and sends 2, then waits: after the server's timeout (here 1 s) it
    gets a 408 and the connection closed, not a 500 left open."""
    monkeypatch.setattr(JsonHandler, "timeout", 1)
    host, port, path = server
    request = f"POST {path} HTTP/1.1\r\nHost: x\r\n{SIGNED}Content-Length: 100\r\n\r\n{{}}".encode()
    got, headers, body, _ = exchange(host, port, request)
    assert got == 408 and body["__type"] == "ValidationException" and "100" in body["message"], body
    assert headers["connection"] == "close"
