"""The three patch types of the Kubernetes API applied as the API server applies them, for the fake
API server (fake_cluster_api.py) and the webhook's tests:

- JSON merge patch (RFC 7386): mappings merge, ``null`` deletes a key, any other value (lists
  included) replaces;
- strategic merge patch (k8s.io/apimachinery strategicpatch), for the lists the gang service
  patches: ``status.conditions`` merge by ``type`` and ``spec.schedulingGates`` by ``name``
  (``patchMergeKey`` in k8s.io/api core/v1 types.go), an element ``{"$patch": "delete", <key>: ...}``
  removes one; other lists replace;
- JSON patch (RFC 6902): add, remove, replace, test on JSON pointers (``-`` appends).

A patch that cannot apply raises PatchError naming the path.
"""

from __future__ import annotations

import copy
from typing import Any

MERGE_KEYS = {"conditions": "type", "schedulingGates": "name"}


class PatchError(ValueError):
    pass


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge(target: Any, patch: Any, field: str = "") -> Any:
    if isinstance(patch, list) and field in MERGE_KEYS and isinstance(target, list):
        key = MERGE_KEYS[field]
        result = copy.deepcopy(target)
        for item in patch:
            if not isinstance(item, dict) or key not in item:
                raise PatchError(f"{field}: every element must carry its merge key {key!r}")
            at = next((i for i, old in enumerate(result) if old.get(key) == item[key]), None)
            if item.get("$patch") == "delete":
                if at is not None:
                    del result[at]
            elif at is None:
                result.append(copy.deepcopy(item))
            else:
                result[at] = strategic_merge(result[at], item)
        return result
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = strategic_merge(result.get(key), value, key)
    return result


def _parts(pointer: str) -> list[str]:
    if not pointer.startswith("/"):
        raise PatchError(f"path {pointer!r}: a JSON pointer starts with /")
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/")]


def _parent(document: Any, parts: list[str], pointer: str) -> Any:
    for part in parts[:-1]:
        if isinstance(document, list) and part.isdigit() and int(part) < len(document):
            document = document[int(part)]
        elif isinstance(document, dict) and part in document:
            document = document[part]
        else:
            raise PatchError(f"path {pointer!r}: {part!r} does not exist")
    return document


def apply_json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise PatchError("a JSON patch is a list of operations")
    document = copy.deepcopy(target)
    for operation in operations:
        op, pointer = operation.get("op"), operation.get("path", "")
        parts = _parts(pointer)
        parent, last = _parent(document, parts, pointer), parts[-1]
        if op == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != operation.get("value"):
                raise PatchError(f"path {pointer!r}: the test failed")
        elif op == "add" and isinstance(parent, list):
            parent.insert(len(parent) if last == "-" else int(last), copy.deepcopy(operation["value"]))
        elif op in ("add", "replace") and isinstance(parent, dict):
            if op == "replace" and last not in parent:
                raise PatchError(f"path {pointer!r}: nothing to replace")
            parent[last] = copy.deepcopy(operation["value"])
        elif op == "remove":
            try:
                del parent[int(last) if isinstance(parent, list) else last]
            except (KeyError, IndexError, ValueError):
                raise PatchError(f"path {pointer!r}: nothing to remove") from None
        else:
            raise PatchError(f"operation {op!r} on {pointer!r} is not supported")
    return document
