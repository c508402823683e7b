"""What CloudFormation replaces in an update, from two synthesized templates and the resource schemas (the
create-only properties cfn-lint ships), and which replaced resource keeps its custom name: CloudFormation
"cannot update a stack when a custom-named resource requires replacing" (the new one is made before the old
one is deleted, under the same name). Pure, for the infra tests.

A resource is replaced when a create-only property's value changes, or refers (Ref, GetAtt, Sub) to a
resource that is replaced (its identifier and ARN change). Custom resources (``Custom::``) have no schema:
their own handler decides (the index's name carries a hash of its body). A custom name is a top-level
property named ``Name`` or ``...Name`` whose value refers to no resource (a reference is not a name: a
Lambda permission's ``FunctionName``).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

_SUB = re.compile(r"\$\{([A-Za-z0-9]+)(?:\.[A-Za-z0-9.]+)?\}")


@cache
def create_only(kind: str) -> tuple[tuple[str, ...], ...]:
    """The create-only properties of a resource type, as paths under Properties (cfn-lint's us-east-1)."""
    import cfnlint.data.schemas

    root = Path(cfnlint.data.schemas.__file__).parent
    providers = json.loads((root / "providers" / "us-east-1.json").read_text())
    if kind not in providers:
        return ()
    schema = json.loads((root / "resources" / f"{providers[kind]}.json").read_text())
    return tuple(
        tuple(pointer.removeprefix("/properties/").split("/"))
        for pointer in schema.get("createOnlyProperties", [])
    )


def value_at(properties: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = properties
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def references(value: Any) -> set[str]:
    """The logical IDs a template value refers to (pseudo parameters such as AWS::Region are not)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "Ref" and isinstance(inner, str) and not inner.startswith("AWS::"):
                found.add(inner)
            elif key == "Fn::GetAtt":
                target = inner[0] if isinstance(inner, list) else str(inner).split(".")[0]
                found.add(str(target))
            elif key == "Fn::Sub":
                text = inner[0] if isinstance(inner, list) else inner
                found |= {m for m in _SUB.findall(str(text)) if not m.startswith("AWS")}
                if isinstance(inner, list) and len(inner) > 1:
                    found |= references(inner[1])
            else:
                found |= references(inner)
    elif isinstance(value, list):
        for inner in value:
            found |= references(inner)
    return found


def replaced(before: dict[str, Any], after: dict[str, Any]) -> dict[str, str]:
    """The resources in both templates that the update replaces, each with why."""
    old, new = before["Resources"], after["Resources"]
    common = [k for k in new if k in old and old[k]["Type"] == new[k]["Type"]]
    why: dict[str, str] = {}
    changed = True
    while changed:  # until no more resource follows a replaced one
        changed = False
        for logical in common:
            if logical in why:
                continue
            kind = new[logical]["Type"]
            was, now = old[logical].get("Properties", {}), new[logical].get("Properties", {})
            for path in create_only(kind):
                a, b = value_at(was, path), value_at(now, path)
                if json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True):
                    why[logical] = f"{'.'.join(path)} changed"
                elif refs := references(b) & set(why):
                    why[logical] = f"{'.'.join(path)} refers to replaced {sorted(refs)[0]}"
                else:
                    continue
                changed = True
                break
    return why


def custom_names(resource: dict[str, Any]) -> dict[str, Any]:
    properties = resource.get("Properties", {})
    return {
        key: value
        for key, value in properties.items()
        if key.endswith("Name") and not references(value) and not resource["Type"].startswith("Custom::")
    }


def name_collisions(before: dict[str, Any], after: dict[str, Any]) -> dict[str, str]:
    """Replaced resources that keep a custom name: each fails the update (logical ID: what and why)."""
    old, new = before["Resources"], after["Resources"]
    found = {}
    for logical, reason in replaced(before, after).items():
        kept = {
            key: value
            for key, value in custom_names(new[logical]).items()
            if json.dumps(value, sort_keys=True)
            == json.dumps(old[logical].get("Properties", {}).get(key), sort_keys=True)
        }
        if kept:
            found[logical] = f"{new[logical]['Type']} keeps {sorted(kept)} while replaced ({reason})"
    return found
