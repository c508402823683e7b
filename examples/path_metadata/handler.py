"""Example: metadata from the document's path and its front matter, on every chunk, then our contexts.

Deployed as the function's handler ``handler.handler`` beside the ``contextual_kb.runtime`` package (the
function's asset); the context step is the function's ``CONTEXT_STRATEGY`` (Claude by default). Every chunk
gets ``folder``, ``top_folder`` and ``file_name`` from the object key (``team-a/guides/setup.md``), and the
front matter's ``title``, ``author``, ``date``, ``category`` and ``tags`` when the document opens with one
(``---`` lines, ``key: value``, ``tags: [a, b]``). Filter on them at query time (``ckb query ... --filter``).
"""

from __future__ import annotations

import re

from contextual_kb.runtime.sdk import Chunk, Document, transformation

# The front matter keys copied, in the order they are added: the vector store's metadata limit (1 KB on S3
# Vectors, with the KB's and the file's keys) leaves the last ones out first, counted as StepMetadataLeftOut.
FRONT_MATTER_KEYS = ("title", "author", "date", "category", "tags")
MAX_VALUE_CHARS = 100
MAX_TAGS = 10
# The opening block: a line of ``---``, the fields, a closing ``---`` (or ``...``).
FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL)
FIELD = re.compile(r"^([A-Za-z_][\w-]*)[ \t]*:[ \t]*(.*?)[ \t]*$")


def front_matter(text: str) -> dict[str, str | list[str]]:
    """The fields of ``text``'s front matter that are scalars or inline lists (nested YAML is skipped), cut
    to ``MAX_VALUE_CHARS``; ``{}`` when it has none."""
    match = FRONT_MATTER.match(text)
    if match is None:
        return {}
    fields: dict[str, str | list[str]] = {}
    for line in match.group(1).splitlines():
        found = FIELD.match(line)
        if found is None or not found.group(2):
            continue
        key, value = found.group(1).lower(), found.group(2)
        if value.startswith("[") and value.endswith("]"):
            items = [_unquoted(v) for v in value[1:-1].split(",") if v.strip()]
            fields[key] = [v[:MAX_VALUE_CHARS] for v in items[:MAX_TAGS]]
        else:
            fields[key] = _unquoted(value)[:MAX_VALUE_CHARS]
    return fields


def _unquoted(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def path_fields(document: Document) -> dict[str, str]:
    """``folder`` (``team-a/guides``), ``top_folder`` (``team-a``) and ``file_name`` (``setup.md``)."""
    folder = document.folder
    return {"folder": folder, "top_folder": folder.partition("/")[0], "file_name": document.name}


@transformation
def handler(document: Document) -> list[Chunk]:
    # The whole document, not its first chunk: the KB's chunker may cut the front matter in two.
    matter = front_matter(document.text)
    fields: dict[str, object] = dict(path_fields(document))
    fields.update({key: matter[key] for key in FRONT_MATTER_KEYS if key in matter})
    return [chunk.with_metadata(fields) for chunk in document.chunks]
