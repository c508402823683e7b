"""The HTTP side the local stand-ins share (the local Knowledge Base, the Bedrock runtime stand-in): HTTP/1.1
keep-alive, headers and body sent in one segment, no access log, GET/POST/PUT handed to one ``answer``,
answers and errors as JSON in the AWS services' error shape, and a request body read only when its
``Content-Length`` is a number from 0 to ``max_body_bytes`` (anything else is a 400 or a 413, in one JSON
line, and the connection closed: a handler thread is never left waiting for a body that will not come).

Every answer carries ``x-ckb-local: <server name>`` (``identity.HEADER``): a client (``ckb``'s paid-work
estimate, ``identity.standin_at``) can tell a local stand-in from AWS by one response header, whatever the
request.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

from contextual_kb.local.identity import HEADER as LOCAL_HEADER


class HttpError(Exception):
    """An answer in the service's error shape: HTTP status, error code (``__type``), message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"__type": code, "message": message}


def parse_json(raw: bytes) -> Any:
    """A request's JSON body; HttpError 400 when it is not JSON or nests deeper than the parser recurses
    (a RecursionError otherwise: a 500, as if the stand-in had a bug)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise HttpError(400, "ValidationException", "the body is not JSON") from None


class JsonHandler(BaseHTTPRequestHandler):
    """Subclasses set ``server_name`` and implement ``answer(method, body) -> (status, JSON body)``; raising
    ``HttpError`` answers that error, any other exception a 500 (a bug of the stand-in: the client reports
    it, the server lives on)."""

    server_name: ClassVar[str] = "local"
    max_body_bytes: ClassVar[int] = 64 * 1024 * 1024
    protocol_version = "HTTP/1.1"
    # Headers and body in one segment, sent at once: otherwise Nagle's algorithm and delayed ACKs add
    # ~40 ms to every keep-alive answer.
    wbufsize = 1 << 16
    disable_nagle_algorithm = True
    # A client that announces a body and sends less (or goes quiet on a kept-alive connection) frees its
    # thread after this long, not never.
    timeout = 120

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def answer(self, method: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        raise NotImplementedError

    def read_body(self) -> bytes:
        """The request's body; HttpError (the connection then closed) when its length is not one to read."""
        codings = self.headers.get_all("Transfer-Encoding") or []
        if any(coding.strip().lower() != "identity" for coding in codings):
            # The AWS SDKs send a length; a chunked body left unread would be parsed as the next request.
            self.close_connection = True
            raise HttpError(411, "ValidationException", "send the body with a Content-Length, not chunked")
        lengths = self.headers.get_all("Content-Length") or []
        if len(lengths) > 1:  # which one a proxy in front of us read is unknowable: request smuggling
            self.close_connection = True
            raise HttpError(400, "ValidationException", "more than one Content-Length")
        if not lengths:
            return b""
        given = lengths[0].strip()
        if re.fullmatch(r"-[0-9]+", given):
            self.close_connection = True
            raise HttpError(400, "ValidationException", f"Content-Length {given} is negative")
        if not re.fullmatch(r"[0-9]+", given):  # int() would take "1_0", "+2", " ٣"
            self.close_connection = True
            raise HttpError(400, "ValidationException", f"Content-Length {given!r} is not a number")
        length = int(given)
        if length > self.max_body_bytes:
            self.close_connection = True  # the body is not read: the connection cannot carry another request
            raise HttpError(
                413, "ValidationException", f"a body of {length:,} bytes: at most {self.max_body_bytes:,}"
            )
        if not length:
            return b""
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            body = None
        if body is None or len(body) < length:  # the client went quiet (or closed) before its body was whole
            self.close_connection = True
            raise HttpError(
                408, "ValidationException", f"the body did not arrive: {length:,} bytes announced"
            )
        return body

    def _handle(self, method: str) -> None:
        self.arrived = time.monotonic()  # before the body is read: when the request came
        try:
            status, reply = self.answer(method, self.read_body())
        except HttpError as exc:
            status, reply = exc.status, error_body(exc.code, exc.message)
        except Exception as exc:  # a bug of the stand-in: a 500 the client reports, never a dead server
            status, reply = 500, error_body("InternalServerException", f"{type(exc).__name__}: {exc}")
        self.send_json(status, reply)

    def send_json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header(LOCAL_HEADER, self.server_name)
        if status >= 300:
            self.send_header(
                "x-amzn-ErrorType", f"{body.get('__type', 'Unknown')}:http://internal.amazon.com/"
            )
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        # The client may have given up (its timeout): nothing to do then.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)
            self.wfile.flush()
