"""``ckb mcp``: the query side as an MCP server for agents (``query/mcp_server.py``), over stdio by default or
streamable HTTP on 127.0.0.1 (its guards: ``query/mcp_http.py``)."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from contextual_kb.cli.errors import choice, explain, usage
from contextual_kb.cli.terminal import error_console, plain

TRANSPORTS = ("stdio", "streamable-http")


def _one_line(exc: BaseException) -> str | None:
    """The line ``ckb`` prints for ``exc`` (without its ``error:``), or None for a bug."""
    error = explain(exc)
    return None if error is None else error.line()


def mcp(
    transport: Annotated[
        str, typer.Option(help="stdio, or streamable-http.", callback=choice(TRANSPORTS), metavar="NAME")
    ] = "stdio",
    host: Annotated[
        str,
        typer.Option(
            help="streamable-http: the address to bind (loopback unless told; elsewhere CKB_MCP_TOKEN is "
            "required).",
            metavar="HOST",
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(help="streamable-http: the port.", min=1, max=65535, metavar="N")
    ] = 8000,
    stack: Annotated[
        str | None,
        typer.Option(envvar="CKB_STACK", help="The stack tools use when none is named.", metavar="NAME"),
    ] = None,
    region: Annotated[
        str | None, typer.Option(help="AWS region.", show_default="AWS_REGION", metavar="REGION")
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            help="streamable-http: a Host name clients reach the server by (repeat; the loopback names and "
            "--host always pass, any other Host gets 421).",
            metavar="NAME",
        ),
    ] = None,
    allowed_origin: Annotated[
        list[str] | None,
        typer.Option(
            help="streamable-http: a browser Origin to accept, e.g. https://app.example.com (repeat; any "
            "other Origin gets 403).",
            metavar="URL",
        ),
    ] = None,
    insecure_no_token: Annotated[
        bool,
        typer.Option(
            "--insecure-no-token",
            help="streamable-http off loopback: serve without CKB_MCP_TOKEN (anyone who reaches the "
            "address can search and spend; warned at every start).",
        ),
    ] = False,
    tag_key: Annotated[
        str | None,
        typer.Option(
            envvar="CKB_MCP_TAG_KEY",
            help="List only the Knowledge Bases tagged KEY=true (AWS Labs' KB_INCLUSION_TAG_KEY).",
            metavar="KEY",
        ),
    ] = None,
) -> None:
    """An MCP server for agents: list and describe Knowledge Bases, query (hybrid + rerank, filters), ask
    (an answer with sources), doctor. Each failure is a tool error in ckb's one line."""
    # Without the mcp extra, the command stops before this in one line (cli/extras.py; errors.py for a
    # module of it missing here anyway).
    from contextual_kb.query.mcp_server import build_server

    guards = None
    if transport != "stdio":
        from contextual_kb.query import mcp_http

        try:
            guards = mcp_http.plan(
                host,
                port,
                token=os.environ.get(mcp_http.TOKEN_ENV),
                allowed_hosts=allowed_host or (),
                allowed_origins=allowed_origin or (),
                insecure_no_token=insecure_no_token,
            )
        except mcp_http.HttpSetupError as exc:
            raise usage("mcp", str(exc)) from None
    server = build_server(explain=_one_line, default_stack=stack, region=region, tag_key=tag_key)
    if guards is None:
        server.run("stdio")
        return
    for warning in guards.warnings:
        error_console().print(plain(warning))
    mcp_http.serve(server, guards)


def register(app: typer.Typer) -> None:
    app.command(name="mcp")(mcp)
