"""The command line's one error boundary.

Every failure a user can cause or meet (a mistyped option, an unreadable file, no AWS credentials, an endpoint
that does not answer, an AWS error, a transformation that fails) ends in one line on stderr:
``error: <what>: <why>. <what to do>``, exit 1 (usage errors: 2). ``--debug`` or ``CKB_DEBUG=1`` adds the
traceback. Anything else is a bug and keeps its traceback.

Commands raise; only ``CkbGroup.main`` catches. No command needs a try/except of its own to be clear.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import typer

# typer 0.29 carries its own copy of click (no click dependency); this one has no public name in it.
from typer._click.exceptions import NoArgsIsHelpError
from typer.core import TyperGroup

from contextual_kb.cli.terminal import clean

DEBUG_ENV = "CKB_DEBUG"
CREDENTIALS_TODO = (
    "Configure AWS credentials (aws configure, aws sso login, AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY)"
)
_CLIENT_ERROR_TODO = {
    "AccessDenied": "check the IAM permissions of the credentials in use",
    "AccessDeniedException": "check the IAM permissions of the credentials in use",
    "ExpiredToken": "refresh your credentials (aws sso login, or new session keys)",
    "ExpiredTokenException": "refresh your credentials (aws sso login, or new session keys)",
    "InvalidAccessKeyId": "check your credentials: AWS does not know this access key",
    "UnrecognizedClientException": "check your credentials: AWS does not know this access key",
    "SignatureDoesNotMatch": "check your secret access key",
    "NoSuchBucket": "check the bucket name and the region",
    "ResourceNotFoundException": "check the id and the region",
    "ThrottlingException": "AWS kept throttling after the SDK's retries; try again later or ask for a quota",
}


_NAMED = {"BucketName": "bucket", "Key": "key"}  # what S3 errors name


class CliError(Exception):
    """A failure the command line explains: what failed, why, and what to do. ``code`` 2 is a usage error."""

    def __init__(self, what: str, why: str = "", todo: str = "", *, code: int = 1) -> None:
        self.what, self.why, self.todo, self.code = what, why, todo, code
        super().__init__(self.line())

    def line(self) -> str:
        text = f"{self.what}: {self.why}" if self.why else self.what
        text = text.rstrip()
        if self.todo:
            text = f"{text.rstrip('.')}. {self.todo[:1].upper()}{self.todo[1:]}"
        return text


def usage(option: str, why: str, todo: str = "") -> CliError:
    """A bad option value, named: exit 2."""
    return CliError(option, why, todo, code=2)


def choice(allowed: Sequence[str], *, case_sensitive: bool = True) -> Any:
    """An option callback that accepts one of ``allowed`` (typer's message names the option, and the
    environment variable when the value came from one)."""

    def check(value: str | None) -> str | None:
        if value is None:
            return value
        for name in allowed:
            if name == value or (not case_sensitive and name.lower() == value.lower()):
                return name
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(allowed)}")

    return check


def explain(exc: BaseException) -> CliError | None:
    """The known failure ``exc`` as one line, or None for a bug (which keeps its traceback)."""
    if isinstance(exc, CliError):
        return exc
    if isinstance(exc, typer.TyperException):  # typer's usage errors: bad options, missing files
        return _usage(exc)
    if isinstance(exc, ModuleNotFoundError):
        return _missing_module(exc)
    explained = _aws(exc)
    if explained is not None:
        return explained
    # Imported here: these modules are heavier than the command line's start-up needs.
    from contextual_kb.deferred.claim import ContextualizeError
    from contextual_kb.local.inputs import InputFileError
    from contextual_kb.local.runner import HandlerError
    from contextual_kb.query.deployment import DeploymentError
    from contextual_kb.query.ingestion import IngestionError
    from contextual_kb.query.retrieval import RetrievalError
    from contextual_kb.runtime.errors import StorageError, TransformationError

    if isinstance(exc, HandlerError):
        if isinstance(exc.error, TransformationError):
            return CliError(
                "transformation failed",
                str(exc.error),
                "The Knowledge Base is expected to mark the file(s) failed; --logs shows the handler's log",
            )
        return explain(exc.error)
    if isinstance(exc, StorageError):  # outside a transformation: ckb contextualize's own reads and writes
        return CliError("S3 request failed", str(exc))
    if isinstance(exc, TransformationError):
        return CliError("transformation failed", str(exc))
    if isinstance(exc, InputFileError):  # a file the user named: a usage error
        return CliError(str(exc), code=2)
    if isinstance(exc, DeploymentError | IngestionError | RetrievalError | ContextualizeError):
        return CliError(str(exc))
    if isinstance(exc, OSError) and exc.filename and exc.strerror:
        return CliError(str(exc.filename), exc.strerror.lower())
    return None


# A default path that is missing says where the command runs from, not only that the path is missing.
_MISSING_DEFAULTS = {
    "'events/documents'": "The sample documents are in the repository: run ckb demo from the repository's "
    "folder, or give --documents FOLDER (text files)",
}


def _usage(exc: typer.TyperException) -> CliError:
    context = getattr(exc, "ctx", None)
    todo = f"Run '{context.command_path} --help' for the options" if context is not None else ""
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    if "does not exist" in message:
        todo = next((hint for path, hint in _MISSING_DEFAULTS.items() if path in message), todo)
    return CliError(message.rstrip("."), todo=todo, code=getattr(exc, "exit_code", 2))


def _missing_module(exc: ModuleNotFoundError) -> CliError | None:
    """A module of an extra that the command-to-extra table did not foresee: the same one line. Any other
    missing module is a bug of the install (or of ours) and keeps its traceback."""
    from contextual_kb.cli.extras import EXTRA_OF_MODULE, USAGE_EXIT, line, needed

    top = (exc.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    command, params = CkbGroup.invoked
    extras = needed(command, params)
    extras = extras if extra in extras else (*extras, extra)
    return CliError(line(f"ckb {command}".rstrip(), extras, [top]), code=USAGE_EXIT)


def _aws(exc: BaseException) -> CliError | None:
    from botocore import exceptions as boto

    if isinstance(exc, boto.NoCredentialsError | boto.PartialCredentialsError):
        from contextual_kb.cli.extras import offline_todo

        # The offline commands it recommends need extras this install may lack: it says which.
        return CliError("no AWS credentials", str(exc).rstrip("."), f"{CREDENTIALS_TODO}, {offline_todo()}")
    if isinstance(exc, boto.NoRegionError):
        return CliError("no AWS region", "none is configured", "Pass --region or set AWS_REGION")
    if isinstance(exc, boto.EndpointConnectionError | boto.ConnectTimeoutError):
        endpoint = exc.kwargs.get("endpoint_url", "the endpoint")
        return CliError(
            f"cannot reach {endpoint}",
            "the connection failed",
            "Check the endpoint (AWS_ENDPOINT_URL_*, --endpoint, --region) and the network",
        )
    if isinstance(exc, boto.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "Unknown"))
        message = str(error.get("Message", "")).rstrip(".")
        # S3 names the bucket or key its error is about; say it, since which one is often the question.
        about = ", ".join(f"{label} {error[name]}" for name, label in _NAMED.items() if error.get(name))
        why = f"{code}: {message}" if message else code
        return CliError(
            f"{exc.operation_name} failed",
            f"{why} ({about})" if about else why,
            _CLIENT_ERROR_TODO.get(code, ""),
        )
    if isinstance(exc, boto.BotoCoreError):  # ParamValidationError's message spans lines: one here
        return CliError("AWS request failed", " ".join(str(exc).split()))
    return None


def report(error: CliError, exc: BaseException, *, debug: bool) -> int:
    """Print ``error`` (after the traceback when debugging); the exit code."""
    if debug:
        traceback.print_exception(exc)
    sys.stderr.write(f"error: {clean(error.line())}\n")
    sys.stderr.flush()
    return error.code


class CkbGroup(TyperGroup):
    """The ``ckb`` group, whose ``main`` is the boundary: for ``ckb`` itself and for the test runner alike."""

    debug: bool = False  # set by ``--debug`` on the group
    invoked: tuple[str, dict[str, Any]] = ("", {})  # the command run and its options, for the extras' line

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command, checked for the extras it needs (cli/extras.py) once its options are parsed and
        before it runs: a missing extra is one line, whatever the command imports first."""
        command = super().get_command(ctx, cmd_name)
        if command is None or getattr(command, "_ckb_extras_checked", False):
            return command
        run = command.invoke

        def invoke(sub: Any) -> Any:
            from contextual_kb.cli.extras import USAGE_EXIT, check

            CkbGroup.invoked = (command.name or cmd_name, dict(sub.params))
            lacking = check(*CkbGroup.invoked)
            if lacking:
                raise CliError(lacking, code=USAGE_EXIT)
            return run(sub)

        command.invoke = invoke
        command._ckb_extras_checked = True
        return command

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        CkbGroup.debug = os.environ.get(DEBUG_ENV, "").lower() in {"1", "true", "yes"}
        try:
            result = super().main(
                args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False, **extra
            )
        except NoArgsIsHelpError as exc:  # `ckb` alone: the help, as click would
            exc.show()
            code = exc.exit_code
        except typer.Abort:
            sys.stderr.write("aborted\n")
            code = 1
        except Exception as exc:
            error = explain(exc)
            if error is None or not standalone_mode:
                raise
            code = report(error, exc, debug=CkbGroup.debug)
        else:
            code = result if isinstance(result, int) else 0
        if not standalone_mode:
            return code
        sys.exit(code)
