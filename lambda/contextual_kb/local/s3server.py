"""A local S3 endpoint (moto's threaded server) bound to 127.0.0.1, for `ckb transform` and the demo."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Only what a local run needs when the caller has none: moto accepts any credentials.
LOCAL_DEFAULTS = {
    "AWS_ACCESS_KEY_ID": "local",
    "AWS_SECRET_ACCESS_KEY": "local",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def local_s3() -> Iterator[str]:
    """Start moto's S3 on a free loopback port, point the SDK at it, stop it (and restore env) on exit."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    saved = {name: os.environ.get(name) for name in [*LOCAL_DEFAULTS, "AWS_ENDPOINT_URL_S3"]}
    try:
        for name, value in LOCAL_DEFAULTS.items():
            os.environ.setdefault(name, value)
        os.environ["AWS_ENDPOINT_URL_S3"] = endpoint
        yield endpoint
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def keep_moto_bodies_in_files() -> None:
    """For memory measurements: moto keeps object bodies in temporary files (any body over a byte rolls
    over), so what the handler writes does not count as its memory, and ETags are hashed a megabyte at a
    time (moto reads a body whole to hash it: a 16 MB allocation for a 16 MB object)."""
    import hashlib

    from moto.s3.models import FakeKey

    os.environ["MOTO_S3_DEFAULT_KEY_BUFFER_SIZE"] = "1"

    def etag(key: Any) -> str:
        if key._etag is None:
            digest = hashlib.md5(usedforsecurity=False)
            key._value_buffer.seek(0)
            for block in iter(lambda: key._value_buffer.read(1 << 20), b""):
                digest.update(block)
            key._etag = digest.hexdigest()
        return f'"{key._etag}"'

    FakeKey.etag = property(etag)  # type: ignore[assignment, method-assign]
