"""``ckb upload``: which files of the paths given go to the source bucket, under which keys, and what the
Knowledge Base will refuse of them; all decided before anything is uploaded.

What a sync ingests is retrievable by anyone who can query the Knowledge Base, so what is uploaded from a
folder is only what the folder plainly holds:

- **Hidden files and folders** (a name starting with ``.``: ``.env``, ``.aws/``) and **version-control
  folders** (``.git/`` holds remotes with tokens, ``CVS/``) are skipped, and said so, unless asked for
  (``include_hidden``). A path named on the command line is uploaded whatever its name: it was asked for.
- **What the folder's ``.gitignore`` files ignore** (git's rules, through pathspec: a ``.gitignore`` applies
  below its own folder, a deeper one's patterns, ``!`` included, win) and the usual **byte-code and build
  outputs** whatever the ``.gitignore`` says (:data:`BUILD_OUTPUTS`: ``__pycache__/``, ``*.pyc``,
  ``build/``, ``dist/``, ``*.egg-info/``, ``node_modules/``, ``venv/``...) are skipped, and said so, unless
  asked for (``include_ignored``). Hidden ones (``.venv``, ``.tox``) are already hidden.
- **Links** are followed only to what lies inside the folders given (a link to ``~/.aws/credentials`` is
  skipped and said so) unless asked for (``follow_links``); a link to a folder is entered only then (each
  folder once: a link loop ends). A broken link, a named pipe or a device is skipped (a pipe would block
  the upload).
- **Keys**: a folder's files keep their path relative to it, after the prefix; two files that would land
  on the same key (``README.md`` of two folders) are refused, naming both, since one would silently
  replace the other. A name that is not UTF-8 (S3 keys are) or a key over S3's 1,024 bytes is refused.

What the Knowledge Base will refuse is warned about before the upload, not left to the sync's failure
list: empty files, types its default parser does not read, files over 50 MB, and metadata files
(``<document>.metadata.json``) that are malformed, over 10 KB, or belong to no document (knowledge-base-ds:
"Supported document formats and limits for knowledge base data"; ../shared/notes/aws-facts.md).

A file already in the bucket with the same size and content is not uploaded again: its SHA-256 is kept in
the object's user metadata (``ckb-sha256``) when ckb uploads it; an object put otherwise is compared by its
ETag, which is the MD5 of a single-part, unencrypted or SSE-S3 upload.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from botocore.exceptions import ClientError

from contextual_kb.query.reprocess import METADATA_MAX_BYTES, METADATA_SUFFIX

VCS_FOLDERS = frozenset({".git", ".hg", ".svn", ".bzr", "_darcs", "CVS"})
# What a build or an interpreter leaves in a source tree: never documents, often large. Git's pattern syntax
# (a trailing / matches folders only), applied at any depth.
BUILD_OUTPUTS = (
    "__pycache__/",
    "*.py[cod]",
    "*$py.class",
    "*.egg-info/",
    "build/",
    "dist/",
    "node_modules/",
    "venv/",
    "__pypackages__/",
    "*.so",
    "*.o",
    "*.class",
)
GITIGNORE = ".gitignore"
# The default parser's formats (knowledge-base-ds, "Supported document formats"); a Knowledge Base with
# advanced parsing reads more (images), hence a warning, not a refusal.
SUPPORTED_SUFFIXES = frozenset({".txt", ".md", ".html", ".doc", ".docx", ".csv", ".xls", ".xlsx", ".pdf"})
MAX_DOCUMENT_BYTES = 50_000_000  # "50 MB" per file: the lower reading, so no refused file goes unwarned
MAX_KEY_BYTES = 1024  # S3's limit on a key, UTF-8
CHECKSUM_METADATA = "ckb-sha256"


class UploadError(Exception):
    """Nothing is uploaded: the message says which path and what to do, in one line."""


def shown(path: Path | str) -> str:
    """A path as the user can read it: undecodable bytes as ``\\xff``, line breaks escaped. Pure."""
    raw = os.fsencode(path).decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in raw)


@dataclass(frozen=True, slots=True)
class File:
    path: Path
    key: str
    size: int


@dataclass
class Plan:
    files: list[File] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path shown, why)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def plan(
    paths: Sequence[Path],
    prefix: str,
    *,
    include_hidden: bool = False,
    follow_links: bool = False,
    include_ignored: bool = False,
) -> Plan:
    """The files to upload and their keys, and what was skipped; ``UploadError`` on a refusal."""
    _utf8(prefix, "--prefix")
    roots = [Path(os.path.realpath(p)) for p in paths if p.is_dir()]
    found = Plan()
    keys: dict[str, File] = {}
    walked: set[str] = set()
    for given in paths:
        if given.is_dir():
            if os.path.realpath(given) in walked:  # the same folder given twice: walked once
                continue
            walked.add(os.path.realpath(given))
            ignored = None if include_ignored else _Ignored()
            entries = _walk(given, roots, include_hidden, follow_links, found.skipped, ignored)
        elif given.is_file():  # named on the command line: uploaded whatever its name, or a link's target
            entries = iter([(given, PurePosixPath(_utf8(given.name, shown(given))))])
        else:
            raise UploadError(f"{shown(given)}: not a regular file or a folder")
        for path, relative in entries:
            key = prefix + relative.as_posix()
            if len(key.encode("utf-8")) > MAX_KEY_BYTES:
                raise UploadError(
                    f"{shown(path)}: its key is over S3's {MAX_KEY_BYTES:,} bytes; use a shorter --prefix "
                    "or path"
                )
            if not os.access(path, os.R_OK):
                raise UploadError(f"{shown(path)}: not readable by you; fix its permissions or leave it out")
            file = File(path, key, path.stat().st_size)
            if key in keys and os.path.samefile(keys[key].path, path):
                continue  # the same file reached twice (a folder given twice, a link beside its target)
            if key in keys:
                raise UploadError(
                    f"{shown(keys[key].path)} and {shown(path)} would both be uploaded as {shown(key)}: one "
                    "would replace the other. Upload them in two runs with different --prefix values"
                )
            keys[key] = file
            found.files.append(file)
    return found


def _utf8(name: str, what: str) -> str:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise UploadError(f"{what}: the name is not UTF-8 (S3 keys are); rename it") from None
    return name


def _inside(target: Path, roots: Sequence[Path]) -> bool:
    return any(target == root or root in target.parents for root in roots)


def _hidden(name: str) -> bool:
    return name.startswith(".") or name in VCS_FOLDERS


def _hidden_below(target: Path, roots: Sequence[Path]) -> bool:
    """``target`` lies in a hidden or version-control folder (or is hidden) under every folder given that
    holds it: a link to it would upload what the walk itself skips."""
    holding = [root for root in roots if root in target.parents]
    return bool(holding) and all(
        any(_hidden(part) for part in target.relative_to(root).parts) for root in holding
    )


class _Ignored:
    """Git's ignore rules for one folder given: :data:`BUILD_OUTPUTS`, then each ``.gitignore`` met on the
    way down, for the paths below its own folder (pathspec's ``GitIgnoreSpec``: git's own semantics)."""

    def __init__(self) -> None:
        from pathspec import GitIgnoreSpec

        self._spec = GitIgnoreSpec
        self._build = GitIgnoreSpec.from_lines(BUILD_OUTPUTS)
        self._files: dict[PurePosixPath, Any] = {}  # folder (relative to the top) -> its .gitignore's spec

    def enter(self, folder: Path, relative: PurePosixPath) -> None:
        """Read ``folder``'s ``.gitignore``, if any (an unreadable one is read as empty, as git does)."""
        try:
            lines = (folder / GITIGNORE).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return
        self._files[relative] = self._spec.from_lines(line for line in lines if self._valid(line))

    def _valid(self, line: str) -> bool:
        """Git skips a pattern it cannot read (a lone ``!`` or ``\\``); pathspec raises on it."""
        try:
            self._spec.from_lines([line])
        except ValueError:
            return False
        return True

    def why(self, relative: PurePosixPath, is_folder: bool) -> str:
        """Why ``relative`` is skipped ('' when it is not): the deepest ``.gitignore`` with a say decides."""
        if self._build.match_file(relative.as_posix() + ("/" if is_folder else "")):
            return "a build or byte-code output (--include-ignored uploads it)"
        for base in sorted(self._files, key=lambda b: len(b.parts), reverse=True):
            if base != PurePosixPath() and base not in relative.parents:
                continue
            below = relative.relative_to(base).as_posix() + ("/" if is_folder else "")
            result = self._files[base].check_file(below)
            if result.include is not None:
                where = (base / GITIGNORE).as_posix()
                return f"ignored by {where} (--include-ignored uploads it)" if result.include else ""
        return ""


def _walk(
    top: Path,
    roots: Sequence[Path],
    include_hidden: bool,
    follow_links: bool,
    skipped: list[tuple[str, str]],
    ignored: _Ignored | None = None,
) -> Iterator[tuple[Path, PurePosixPath]]:
    """(file, path relative to ``top``) of what is to be uploaded, in name order; what is not, into
    ``skipped``. Each real folder is entered once (a link loop under ``follow_links`` ends)."""
    entered = {os.path.realpath(top)}
    pending = [(top, PurePosixPath())]
    while pending:
        folder, relative = pending.pop()
        if ignored is not None:
            ignored.enter(folder, relative)
        with os.scandir(folder) as scan:
            entries = sorted(scan, key=lambda e: e.name)
        folders: list[tuple[Path, PurePosixPath]] = []
        for entry in entries:
            path = Path(entry.path)
            if not include_hidden and _hidden(entry.name):
                kind = "a version-control folder" if entry.name in VCS_FOLDERS else "hidden"
                skipped.append((shown(path), f"{kind} (--include-hidden uploads it)"))
                continue
            is_link = entry.is_symlink()
            if is_link:
                target = Path(os.path.realpath(path))
                if not target.exists():
                    skipped.append((shown(path), "a broken link"))
                    continue
                if not follow_links and not _inside(target, roots):
                    skipped.append(
                        (shown(path), f"a link out of the folders given, to {shown(target)} (--follow-links)")
                    )
                    continue
                if not include_hidden and _hidden_below(target, roots):
                    skipped.append((shown(path), f"a link to {shown(target)}, hidden (--include-hidden)"))
                    continue
            mode = path.stat().st_mode  # the link's target
            why = "" if ignored is None else ignored.why(relative / entry.name, stat.S_ISDIR(mode))
            if why:
                skipped.append((shown(path), why))
                continue
            if stat.S_ISDIR(mode):
                if is_link and not follow_links:
                    skipped.append((shown(path), "a link to a folder (--follow-links enters it)"))
                    continue
                real = os.path.realpath(path)
                if real in entered:
                    skipped.append((shown(path), "a folder already uploaded here (a link loop)"))
                    continue
                entered.add(real)
                folders.append((path, relative / _utf8(entry.name, shown(path))))
            elif stat.S_ISREG(mode):
                yield path, relative / _utf8(entry.name, shown(path))
            else:
                skipped.append((shown(path), "not a regular file (a pipe, socket or device)"))
        pending.extend(reversed(folders))  # depth first, in name order


def refusals(found: Plan, exists: Callable[[str], bool]) -> list[tuple[str, str]]:
    """(path shown, why) for each file the Knowledge Base will refuse or ignore; ``exists(key)`` says
    whether the bucket already holds a document a metadata file of this upload belongs to."""
    keys = {f.key for f in found.files}
    warnings = []
    for file in found.files:
        if file.key.endswith(METADATA_SUFFIX):
            why = _metadata_problem(file)
            document = file.key[: -len(METADATA_SUFFIX)]
            if not why and document not in keys and not exists(document):
                why = f"a metadata file for {shown(document)}, which is neither uploaded nor in the bucket"
        elif file.size == 0:
            why = "empty: the Knowledge Base has nothing to ingest"
        elif file.size > MAX_DOCUMENT_BYTES:
            why = f"{file.size:,} bytes: over the Knowledge Base's 50 MB per file, it will fail"
        elif file.path.suffix.lower() not in SUPPORTED_SUFFIXES:
            why = (
                f"{file.path.suffix or 'no extension'}: not a type the Knowledge Base's default parser reads "
                f"({' '.join(sorted(SUPPORTED_SUFFIXES))})"
            )
        else:
            why = ""
        if why:
            warnings.append((shown(file.path), why))
    return warnings


def _metadata_problem(file: File) -> str:
    if file.size > METADATA_MAX_BYTES:
        return f"a metadata file of {file.size:,} bytes: the Knowledge Base takes at most 10 KB"
    try:
        document = json.loads(file.path.read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        return f"a metadata file that is not JSON ({exc})"
    if not isinstance(document, dict) or not isinstance(document.get("metadataAttributes"), dict):
        return 'a metadata file without a "metadataAttributes" object'
    return ""


def digests(path: Path) -> tuple[str, str]:
    """(MD5, SHA-256) of the file's bytes, hex, in one read."""
    md5, sha256 = hashlib.md5(usedforsecurity=False), hashlib.sha256()
    with path.open("rb") as stream:
        while block := stream.read(1 << 20):
            md5.update(block)
            sha256.update(block)
    return md5.hexdigest(), sha256.hexdigest()


def unchanged(s3: Any, bucket: str, file: File, md5: str, sha256: str) -> bool:
    """The bucket already holds this content at the file's key: same size, and the same SHA-256 (ours) or
    the same single-part ETag. Unknown (no object, no permission to look) is not unchanged."""
    try:
        head = s3.head_object(Bucket=bucket, Key=file.key)
    except ClientError:
        return False
    if int(head.get("ContentLength", -1)) != file.size:
        return False
    if (head.get("Metadata") or {}).get(CHECKSUM_METADATA) == sha256:
        return True
    return str(head.get("ETag", "")).strip('"') == md5
