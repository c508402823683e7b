"""How a local stand-in says what it is: a header on every answer of the local Knowledge Base and the Bedrock
stand-in, so a client (``ckb``'s paid-work estimate) knows a local stack is free, whatever the shell's
variables claim. Standard library only."""

from __future__ import annotations

import ipaddress
import urllib.error
import urllib.request
from urllib.parse import urlparse

HEADER = "x-ckb-local"  # its value: which stand-in ("knowledge-base", "bedrock-runtime")
LOOPBACK_NAMES = frozenset({"localhost"})


def _loopback(url: str) -> bool:
    host = urlparse(url).hostname or ""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def standin_at(url: str, *, timeout: float = 2.0) -> str | None:
    """Which stand-in answers at ``url`` (its header), or None: nothing asked of a URL that is not loopback
    (the stand-ins bind 127.0.0.1 only; a real endpoint is never called for this)."""
    if not url or not _loopback(url):
        return None
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:  # loopback only
            return answer.headers.get(HEADER)
    except urllib.error.HTTPError as refused:  # an unsigned GET: refused, with the header all the same
        return refused.headers.get(HEADER)
    except (OSError, ValueError):
        return None
