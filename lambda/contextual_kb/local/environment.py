"""Environment variables set for a block and put back after it (local runs drive the handler's settings
through its environment, as Lambda would)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def environment(**values: str) -> Iterator[None]:
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def handler_environment(**values: str) -> Iterator[None]:
    """``environment``, and the handler's runtime (settings, strategy, S3 client) rebuilt from it for the
    block; cleared again as it ends, so the next run builds it from the environment as it was."""
    from contextual_kb.runtime import handler

    with environment(**values):
        handler.runtime.cache_clear()
        try:
            yield
        finally:
            handler.runtime.cache_clear()
