"""A user's own transformation handler (``contextual_kb.runtime.sdk``), loaded from its file as Lambda loads
it, so ``ckb transform --handler`` and ``ckb local --handler`` run it instead of ours before it is deployed.

``FILE`` or ``FILE:NAME``: the function ``NAME`` (``handler`` by default, the examples' ``handler.handler``)
of the Python file ``FILE``. The file's folder goes first on ``sys.path``, as the function's asset root is
in Lambda, so the file imports its neighbours as it would there. Every way this can go wrong before the
handler runs is a :class:`HandlerFileError` of one line; the import's own error is its ``__cause__`` (its
traceback with ``--debug``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_NAME = "handler"
Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


class HandlerFileError(ValueError):
    """The handler cannot be loaded: the file, the name, or the import; one line."""


@dataclass(frozen=True)
class UserHandler:
    """The loaded function, and where it came from (``FILE:NAME`` as the user gave it, for notes)."""

    function: Handler
    path: Path
    name: str

    @property
    def spec(self) -> str:
        return f"{self.path}:{self.name}"

    @property
    def lambda_name(self) -> str:
        """What the function's Handler setting would be in Lambda: ``module.function``."""
        return f"{self.path.stem}.{self.name}"


def split_spec(spec: str) -> tuple[Path, str]:
    """``FILE[:NAME]`` -> (file, name). A ``:`` followed by an identifier at the end names the function (a
    Windows drive letter's ``C:`` is not one). Pure."""
    found = re.fullmatch(r"(?P<file>.+):(?P<name>[A-Za-z_]\w*)", spec)
    if found and not re.fullmatch(r"[A-Za-z]", found["file"]):
        return Path(found["file"]), found["name"]
    return Path(spec), DEFAULT_NAME


def load(spec: str) -> UserHandler:
    """Import ``FILE`` and return its function ``NAME``; :class:`HandlerFileError` otherwise."""
    path, name = split_spec(spec)
    if not path.exists():
        raise HandlerFileError(f"{path}: no such file")
    if not path.is_file():
        raise HandlerFileError(f"{path}: a folder, not a Python file")
    if path.suffix != ".py":
        raise HandlerFileError(f"{path}: not a .py file (Lambda imports the handler as a Python module)")
    given, path = path, path.resolve()
    module_name = "_ckb_user_handler_" + re.sub(r"\W", "_", path.stem)
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise HandlerFileError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # the asset root, as in Lambda: the file's neighbours import
    sys.modules[module_name] = module
    try:
        # What the file prints as it is imported goes to stderr: stdout may be a --json answer.
        with contextlib.redirect_stdout(sys.stderr):
            module_spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(module_name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        where = _where(exc, path)
        raise HandlerFileError(
            f"{path}: importing it raised {type(exc).__name__}{where}: {_first_line(exc)}"
        ) from exc
    function = getattr(module, name, None)
    if function is None:
        found = sorted(
            n
            for n, value in vars(module).items()
            if callable(value) and not n.startswith("_") and getattr(value, "__module__", None) == module_name
        )
        hint = f" (its functions: {', '.join(found[:8])})" if found else ""
        raise HandlerFileError(f"{path}: no function {name!r} in it{hint}; name one as {path.name}:NAME")
    if not callable(function):
        raise HandlerFileError(f"{path}: {name!r} is a {type(function).__name__}, not a function")
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        parameters = None
    if parameters is not None and len(parameters) != 2:
        raise HandlerFileError(
            f"{path}: {name!r} takes {len(parameters)} argument(s), not a Lambda handler's (event, context): "
            "make it one with @transformation or Pipeline(...).handler() (docs/SDK.md)"
        )
    return UserHandler(function, given, name)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


def _where(exc: BaseException, path: Path) -> str:
    """`` at line N`` of the user's file, where the import failed in it (or its syntax error is)."""
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f" at line {exc.lineno}"
    lines = [line for frame, line in _frames(exc) if Path(frame.f_code.co_filename) == path]
    return f" at line {lines[-1]}" if lines else ""


def _frames(exc: BaseException) -> Any:
    import traceback

    return traceback.walk_tb(exc.__traceback__)
