"""``ckb mcp --transport streamable-http``: the guards in front of the MCP server's HTTP endpoint.

The MCP specification (Transports, streamable HTTP, "Security Warning") says servers MUST validate the
``Origin`` header on all incoming connections (403 when present and invalid), SHOULD bind localhost when
run locally and SHOULD authenticate every connection. The SDK turns its Host and Origin checks on only for
the names ``127.0.0.1``, ``localhost`` and ``::1``: bound anywhere else, it served a foreign Host and Origin.
Here the checks hold whatever the address: the loopback names, the bound address itself and the names
given with ``--allowed-host`` / ``--allowed-origin``. Off loopback a bearer token (``CKB_MCP_TOKEN``) is
required, or an explicit ``--insecure-no-token`` that prints a warning at every start.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

TOKEN_ENV = "CKB_MCP_TOKEN"
MIN_TOKEN_CHARS = 32
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_MAKE_TOKEN = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


class HttpSetupError(Exception):
    """``ckb mcp`` refuses to start over HTTP; the message is its one line."""


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_every_interface(host: str) -> bool:
    """0.0.0.0, ::, or any spelling of them (``0:0::0``), or no host at all."""
    try:
        return not host or ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


_NAME = r"(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(:[0-9]{1,5})?"


def _host_name(given: str) -> str:
    """An --allowed-host as the Host header carries it (lower case, an IPv6 address bracketed), or an
    ``HttpSetupError``: a URL or a path there would match no request, and every client would get 421."""
    name = given.strip().lower()
    if ":" in name and not name.startswith("["):
        with contextlib.suppress(ValueError):  # a name with a port stays as it is
            name = f"[{ipaddress.IPv6Address(name)}]"
    if not re.fullmatch(_NAME, name):
        raise HttpSetupError(
            f"--allowed-host {given}: a host name or address, as clients reach this server by (e.g. "
            "mcp.example.com, or mcp.example.com:8443), not a URL"
        )
    return name


def _origin(given: str) -> str:
    """An --allowed-origin as a browser sends it (scheme, host, port if not the default), or an
    ``HttpSetupError``: without its scheme, or with a path, it would match no Origin, and browsers get 403."""
    origin = given.strip().rstrip("/").lower()
    if not re.fullmatch(f"https?://{_NAME}", origin):
        raise HttpSetupError(
            f"--allowed-origin {given}: an origin as browsers send it, scheme and host (and port), e.g. "
            "https://app.example.com"
        )
    return origin


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


@dataclass(frozen=True, slots=True)
class HttpPlan:
    """What the HTTP endpoint accepts: Host and Origin values (the SDK's patterns: exact, or ``name:*`` for
    any port), and the bearer token (None: no token asked, said in ``warnings``)."""

    host: str
    port: int
    allowed_hosts: tuple[str, ...]
    allowed_origins: tuple[str, ...]
    token: str | None
    warnings: tuple[str, ...] = field(default=())


def plan(
    host: str,
    port: int,
    *,
    token: str | None,
    allowed_hosts: list[str] | tuple[str, ...] = (),
    allowed_origins: list[str] | tuple[str, ...] = (),
    insecure_no_token: bool = False,
) -> HttpPlan:
    """The endpoint's guards for ``host``, or an ``HttpSetupError`` saying what to give. Pure."""
    if host.startswith("[") and host.endswith("]"):  # an IPv6 literal as a URL writes it; bind the address
        host = host[1:-1]
    if token is not None:
        token = token.strip()  # a trailing newline from a file is not part of the secret
        if not token:  # set, to nothing (`$(cat missing-file)`): the operator meant a token; never serve open
            raise HttpSetupError(
                f"{TOKEN_ENV} is set but empty: set it to a random secret of at least {MIN_TOKEN_CHARS} "
                f"characters (`{_MAKE_TOKEN}`), or unset it"
            )
        if not all("!" <= char <= "~" for char in token):  # headers are Latin-1: it could never match
            raise HttpSetupError(
                f"{TOKEN_ENV} has characters a bearer token cannot carry (spaces, non-ASCII): use visible "
                f"ASCII only (`{_MAKE_TOKEN}`)"
            )
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise HttpSetupError(
            f"{TOKEN_ENV} is {len(token)} characters: use a random secret of at least {MIN_TOKEN_CHARS} "
            f"(`{_MAKE_TOKEN}`)"
        )
    loopback = is_loopback(host)
    if is_every_interface(host) and not allowed_hosts:
        raise HttpSetupError(
            f"--host {host or '(all)'} listens on every interface, and the Host check lets only the names "
            "given pass: add --allowed-host NAME for each name or address clients reach this server by"
        )
    if not loopback and token is None and not insecure_no_token:
        raise HttpSetupError(
            f"--host {host} serves your Knowledge Bases (and spends on your AWS credentials) to that "
            f"network: set {TOKEN_ENV} to a secret of at least {MIN_TOKEN_CHARS} characters (clients send "
            f"`Authorization: Bearer <it>`; `{_MAKE_TOKEN}`), or pass --insecure-no-token to serve "
            "without one"
        )
    hosts = list(_LOOPBACK_HOSTS)
    if not is_every_interface(host):
        hosts.append(_bracketed(host).lower())  # browsers send the Host in lower case
    for name in allowed_hosts:
        hosts.append(_host_name(name))
    # A Host header carries a port unless the client used the scheme's default one (a proxy on 443).
    host_patterns = [p for name in dict.fromkeys(hosts) for p in (name, f"{name}:*")]
    origins = [f"http://{name}:*" for name in dict.fromkeys(hosts)]
    origins += [f"https://{name}:*" for name in dict.fromkeys(hosts)]
    origins += [f"{scheme}://{name}" for name in dict.fromkeys(hosts) for scheme in ("http", "https")]
    origins += [_origin(o) for o in allowed_origins]
    warnings = []
    if token is None and not loopback:
        warnings.append(
            f"WARNING: ckb mcp on {_bracketed(host)}:{port} has NO authentication (--insecure-no-token): "
            "anyone who can reach this address can search your Knowledge Bases and spend on your AWS "
            f"account; set {TOKEN_ENV} instead"
        )
    if token is not None and not loopback:
        warnings.append(
            f"ckb mcp on {_bracketed(host)}:{port} speaks plain HTTP: the bearer token crosses the network "
            "in clear unless a TLS proxy stands in front (docs/SECURITY.md, section 7)"
        )
    return HttpPlan(
        host=host,
        port=port,
        allowed_hosts=tuple(host_patterns),
        allowed_origins=tuple(dict.fromkeys(origins)),
        token=token,
        warnings=tuple(warnings),
    )


class BearerToken:
    """ASGI: every HTTP request carries ``Authorization: Bearer <token>`` or gets 401 (compared in constant
    time). Lifespan events pass through (the SDK's session manager starts on them)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            from starlette.datastructures import Headers
            from starlette.responses import Response

            scheme, _, given = Headers(scope=scope).get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self._token):
                # RFC 6750 3.1: no error code when no token came, invalid_token when a wrong one did.
                challenge = 'Bearer realm="ckb mcp"'
                if scheme.lower() == "bearer" and given.strip():
                    challenge += ', error="invalid_token"'
                refused = Response(
                    f"unauthorized: send Authorization: Bearer <{TOKEN_ENV}>\n",
                    status_code=401,
                    headers={"WWW-Authenticate": challenge},
                )
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


def app(server: Any, guards: HttpPlan) -> Any:
    """The ASGI application: the SDK's streamable HTTP app with its Host/Origin checks set from ``guards``,
    behind the bearer token when there is one."""
    from mcp.server.transport_security import TransportSecuritySettings

    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=list(guards.allowed_hosts),
        allowed_origins=list(guards.allowed_origins),
    )
    inner = server.streamable_http_app(transport_security=security, host=guards.host)
    return inner if guards.token is None else BearerToken(inner, guards.token)


def serve(server: Any, guards: HttpPlan) -> None:
    """Serve until stopped (Ctrl-C), logging at WARNING as the server does."""
    import uvicorn

    uvicorn.Server(
        uvicorn.Config(app(server, guards), host=guards.host, port=guards.port, log_level="warning")
    ).run()
