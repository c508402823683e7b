"""``ckb mcp --transport streamable-http``'s guards, through the ``mcp`` SDK's client and raw HTTP: the
Host and Origin checks hold whatever the bound address, a bearer token is asked when one is set (and
required off loopback), and a server that would be open to a network refuses to start in one line.

Every server here binds a loopback address (127.0.0.2 is loopback on Linux but not one of the SDK's three
names, so it shows what any other address would do) or refuses before it binds."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from contextual_kb.cli.main import app
from contextual_kb.local.s3server import free_port, stop_child
from contextual_kb.query import mcp_http

TOKEN = "t" * 20 + "0123456789abcdef"  # 36 characters
TOOLS = {"list_knowledge_bases", "describe_knowledge_base", "query", "ask", "doctor"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def ckb() -> str:
    found = shutil.which("ckb", path=str(Path(sys.executable).parent))
    assert found is not None
    return found


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != mcp_http.TOKEN_ENV}
    return {**env, "AWS_REGION": "us-east-1", **extra}


@contextmanager
def serving(*args: str, **env: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = free_port()
    child = subprocess.Popen(
        [ckb(), "mcp", "--transport", "streamable-http", "--port", str(port), *args],
        env=environment(**env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield child, port
    finally:
        stop_child(child)


def wait_listening(child: subprocess.Popen[str], host: str, port: int) -> None:
    import socket

    deadline = time.monotonic() + 60  # bounded: a minute to listen
    while time.monotonic() < deadline:
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("the server did not listen within a minute")


def post(url: str, **headers: str) -> int:
    return httpx2.post(url, json=INITIALIZE, headers={**HEADERS, **headers}, timeout=10).status_code


async def tools_of(url: str, **headers: str) -> set[str]:
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        return {t.name for t in (await client.list_tools()).tools}


def test_host_and_origin_are_checked_on_any_address() -> None:
    with serving("--host", "127.0.0.2", "--allowed-host", "mcp.example.internal") as (child, port):
        wait_listening(child, "127.0.0.2", port)
        url = f"http://127.0.0.2:{port}/mcp"
        assert asyncio.run(tools_of(url)) == TOOLS  # the SDK's client, Host 127.0.0.2:port
        assert post(url, Host="evil.example") == 421
        assert post(url, Host=f"evil.example:{port}") == 421
        assert post(url, Origin="http://evil.example") == 403
        assert post(url, Origin=f"http://evil.example:{port}") == 403
        assert post(url, Host="mcp.example.internal") == 200  # an allowed name, default port
        assert post(url, Host=f"mcp.example.internal:{port}") == 200
        assert post(url, Origin=f"http://127.0.0.2:{port}") == 200
        assert post(url, Origin="null") == 403  # a sandboxed frame or a file: page
        assert post(url, Host=f"localhost.:{port}") == 421  # spellings not listed fail closed


def test_a_browser_origin_passes_only_when_allowed() -> None:
    with serving("--allowed-origin", "https://app.example.com/") as (child, port):
        wait_listening(child, "127.0.0.1", port)
        url = f"http://127.0.0.1:{port}/mcp"
        assert post(url, Origin="https://app.example.com") == 200
        assert post(url, Origin="https://app.example.com.evil.example") == 403
        assert post(url, Origin="https://other.example.com") == 403


def test_a_token_once_set_is_required() -> None:
    with serving(**{mcp_http.TOKEN_ENV: TOKEN + "\n"}) as (child, port):  # as read from a file
        wait_listening(child, "127.0.0.1", port)
        url = f"http://127.0.0.1:{port}/mcp"
        assert asyncio.run(tools_of(url, Authorization=f"Bearer {TOKEN}")) == TOOLS
        with pytest.raises(Exception):  # noqa: B017 - the SDK's client fails on the 401 in its own way
            asyncio.run(tools_of(url))
        assert post(url) == 401
        assert post(url, Authorization=f"Bearer {TOKEN[:-1]}x") == 401
        assert post(url, Authorization=f"Basic {TOKEN}") == 401
        assert post(url, Authorization=f"bearer {TOKEN}") == 200
        assert post(f"{url}?access_token={TOKEN}") == 401  # a header only: URLs end up in logs (RFC 6750 2.3)
        # RFC 6750 3.1: a challenge without an error when no token came, invalid_token when a wrong one did.
        bare = httpx2.post(url, json=INITIALIZE, headers=HEADERS, timeout=10)
        wrong = httpx2.post(
            url, json=INITIALIZE, headers={**HEADERS, "Authorization": f"Bearer {TOKEN[:-1]}x"}, timeout=10
        )
        assert bare.headers["www-authenticate"] == 'Bearer realm="ckb mcp"'
        assert wrong.headers["www-authenticate"] == 'Bearer realm="ckb mcp", error="invalid_token"'
        assert TOKEN not in bare.text + wrong.text + str(wrong.headers)
        # The Host check still holds for a caller holding the token.
        assert post(url, Authorization=f"Bearer {TOKEN}", Host="evil.example") == 421


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--host", "10.255.255.1"], {}, "set CKB_MCP_TOKEN to a secret of at least 32 characters"),
        (["--host", "0.0.0.0"], {mcp_http.TOKEN_ENV: TOKEN}, "add --allowed-host NAME"),
        ([], {mcp_http.TOKEN_ENV: "short"}, "CKB_MCP_TOKEN is 5 characters"),
    ],
    ids=["no-token-off-loopback", "every-interface-no-names", "short-token"],
)
def test_an_open_server_refuses_to_start_in_one_line(args: list[str], env: dict[str, str], says: str) -> None:
    child = subprocess.run(
        [ckb(), "mcp", "--transport", "streamable-http", "--port", str(free_port()), *args],
        env=environment(**env),
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert child.returncode == 2, child.stderr
    (line,) = child.stderr.strip().splitlines()
    assert line.startswith("error: mcp: ") and says in line


def test_the_opt_out_is_loud(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[mcp_http.HttpPlan] = []
    monkeypatch.setattr(mcp_http, "serve", lambda server, guards: served.append(guards))
    monkeypatch.delenv(mcp_http.TOKEN_ENV, raising=False)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    result = CliRunner().invoke(
        app,
        ["mcp", "--transport", "streamable-http", "--host", "10.255.255.1", "--insecure-no-token"],
    )
    assert result.exit_code == 0, result.output
    (guards,) = served
    assert guards.token is None and "10.255.255.1:*" in guards.allowed_hosts
    assert "WARNING: ckb mcp on 10.255.255.1:8000 has NO authentication" in result.stderr


def test_loopback_means_any_loopback_address() -> None:
    assert mcp_http.plan("127.0.0.1", 1, token=None).warnings == ()
    assert (
        mcp_http.is_loopback("127.0.0.2")
        and mcp_http.is_loopback("::1")
        and mcp_http.is_loopback("localhost")
    )
    assert not mcp_http.is_loopback("0.0.0.0") and not mcp_http.is_loopback("mcp.example.com")
    for every in ("0.0.0.0", "::", "0:0::0", "[::]"):
        assert mcp_http.is_every_interface(every)
        with pytest.raises(mcp_http.HttpSetupError, match="--allowed-host NAME"):
            mcp_http.plan(every, 1, token=TOKEN)
    assert not mcp_http.is_every_interface("10.0.0.5") and not mcp_http.is_every_interface("example.com")


@pytest.mark.parametrize(
    ("token", "says"),
    [
        ("", "CKB_MCP_TOKEN is set but empty"),  # `export CKB_MCP_TOKEN=$(cat missing-file)`
        (" \n", "CKB_MCP_TOKEN is set but empty"),
        ("é" * 40, "cannot carry"),  # a header is Latin-1 on the wire: it could never match
        ("a" * 20 + " " + "b" * 20, "cannot carry"),
    ],
    ids=["empty", "blank", "non-ascii", "inner-space"],
)
def test_a_token_set_wrong_refuses_even_on_loopback(token: str, says: str) -> None:
    """A token set but unusable is the operator's mistake to hear about, not a server quietly left open on
    loopback (empty) or one that refuses every client (characters a bearer token cannot carry)."""
    with pytest.raises(mcp_http.HttpSetupError, match=says) as refused:
        mcp_http.plan("127.0.0.1", 1, token=token)
    assert token.strip() not in str(refused.value) or not token.strip()


def test_the_bound_name_passes_the_host_check_in_any_case() -> None:
    """Browsers send the Host in lower case: --host MCP.Example.com must not refuse them all with 421."""
    guards = mcp_http.plan("MCP.Example.com", 1, token=TOKEN)
    assert "mcp.example.com:*" in guards.allowed_hosts
    assert "http://mcp.example.com:*" in guards.allowed_origins


def test_a_bracketed_ipv6_host_binds_its_address() -> None:
    """`--host [::1]` (as a URL writes it) is the address ::1: uvicorn cannot resolve the bracketed form."""
    guards = mcp_http.plan("[::1]", 1, token=None)
    assert guards.host == "::1" and "[::1]:*" in guards.allowed_hosts and guards.warnings == ()


@pytest.mark.parametrize(
    ("hosts", "origins", "says"),
    [
        (["https://mcp.example.com"], [], "--allowed-host https://mcp.example.com: a host name or address"),
        (["mcp.example.com/mcp"], [], "a host name or address"),
        (["mcp.example.com"], ["app.example.com"], "--allowed-origin app.example.com: an origin"),
        (["mcp.example.com"], ["https://app.example.com/page"], "an origin"),
    ],
    ids=["host-as-url", "host-with-path", "origin-without-scheme", "origin-with-path"],
)
def test_a_name_that_could_never_match_is_refused(hosts: list[str], origins: list[str], says: str) -> None:
    """An operator's --allowed-host URL or --allowed-origin without its scheme would match no request: every
    client refused with 421 or 403 for no reason they can see. Said at start instead, in one line."""
    with pytest.raises(mcp_http.HttpSetupError, match=says):
        mcp_http.plan("10.0.0.5", 1, token=TOKEN, allowed_hosts=hosts, allowed_origins=origins)
