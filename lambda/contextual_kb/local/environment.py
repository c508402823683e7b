"""Environment variables set for a block and put back after it (local runs drive the handler's settings
through its environment, as Lambda would)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


def restore(saved: dict[str, str | None]) -> None:
    """Put variables back as ``saved`` had them (None: unset)."""
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextmanager
def environment(**values: str) -> Iterator[None]:
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        restore(previous)


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


# An offline run reads nothing of the user's AWS setup: a profile that does not exist, a region whose S3
# refuses a bucket without a location constraint (IllegalLocationConstraintException), real credentials.
OFFLINE_REGION = "us-east-1"
_USER_SETUP = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")


@contextmanager
def offline_aws(*, keep_credentials: bool = False) -> Iterator[None]:
    """For the block: local S3 and the local model in one fixed region, with fake credentials and no config
    or credentials file. ``keep_credentials`` (``--bedrock``: real model calls) keeps the user's credentials
    and profile, and keeps their region for the model alone (MODEL_REGION), resolved before it is replaced."""
    values = {"AWS_REGION": OFFLINE_REGION, "AWS_DEFAULT_REGION": OFFLINE_REGION}
    if keep_credentials:
        if not os.environ.get("MODEL_REGION"):
            user_region = _user_region()
            if user_region:
                values["MODEL_REGION"] = user_region
        dropped: tuple[str, ...] = ()
    else:
        values |= {
            "AWS_ACCESS_KEY_ID": "offline",
            "AWS_SECRET_ACCESS_KEY": "offline",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }
        dropped = _USER_SETUP
    saved = {name: os.environ.get(name) for name in (*values, *dropped)}
    for name in dropped:
        os.environ.pop(name, None)
    os.environ.update(values)
    try:
        yield
    finally:
        restore(saved)


def _user_region() -> str:
    """The region the user's environment or profile names (empty when none, or the profile is missing)."""
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        return region
    try:
        import botocore.session

        return str(botocore.session.get_session().get_config_variable("region") or "")
    except Exception:  # a profile that does not exist: Bedrock will say so on the first call
        return ""
