"""``ckb mcp``: the query side as an MCP server for agents (``query/mcp_server.py``), over stdio by default or
streamable HTTP on 127.0.0.1."""

from __future__ import annotations

from typing import Annotated

import typer

from contextual_kb.cli.errors import choice, explain

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
        str, typer.Option(help="streamable-http: the address to bind (loopback unless told).", metavar="HOST")
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

    server = build_server(explain=_one_line, default_stack=stack, region=region, tag_key=tag_key)
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)


def register(app: typer.Typer) -> None:
    app.command(name="mcp")(mcp)
