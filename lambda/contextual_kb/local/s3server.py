"""A local S3 endpoint (moto's threaded server) bound to 127.0.0.1, for `ckb transform` and the demo."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from contextual_kb.local.environment import restore

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
        restore(saved)


@contextmanager
def s3_subprocess() -> Iterator[str]:
    """moto's S3 in a child process on 127.0.0.1 (so its memory is not counted as the caller's); yields its
    URL and stops it afterwards. The child also stops when its standard input closes (the caller died)."""
    command = [sys.executable, "-m", "contextual_kb.local.s3server"]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # main()'s "S3 at http://127.0.0.1:PORT"
        if not line.startswith("S3 at "):
            raise RuntimeError(f"the local S3 did not start: {line!r}")
        yield line.removeprefix("S3 at ").strip()
    finally:
        stop_child(process)


def stop_child(process: subprocess.Popen[str]) -> None:
    """Close its input (it stops on that alone), then terminate, then kill: it never outlives the caller."""
    if process.stdin is not None:
        process.stdin.close()
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def main() -> None:
    """Serve moto's S3 on a free loopback port until standard input closes."""
    argparse.ArgumentParser(description="moto's S3 on 127.0.0.1 until standard input closes.").parse_args()
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    print(f"S3 at http://127.0.0.1:{port}", flush=True)
    try:
        sys.stdin.read()  # returns at EOF: the parent closed the pipe or died
    finally:
        server.stop()


if __name__ == "__main__":
    main()
