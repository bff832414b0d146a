"""The leading comments of a .proto file, by the full name of what they document.

protoc keeps comments only in a descriptor set built with ``--include_source_info`` (grpcio-tools,
a development extra); the generated modules drop them. Our own files follow one layout (buf lint's
COMMENTS rule and the house style): a block of ``//`` lines right above each message, enum,
service, field, enum value and RPC, one declaration per line, so a scanner of lines suffices:

- a comment block followed by a declaration documents it; a blank line detaches the block;
- ``message``, ``enum``, ``service`` and ``oneof`` open a scope closed by ``}`` (a oneof's fields
  belong to its message);
- the block above ``syntax`` is the file's own comment.

``ProtoError`` names the file and line of anything this layout does not cover (a declaration
spread over lines, a ``}`` with nothing open), so a new construct fails loudly, never silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_OPEN = re.compile(r"^(message|enum|service|oneof)\s+(\w+)\s*\{\s*(\})?\s*$")
_RPC = re.compile(r"^rpc\s+(\w+)\s*\(.*\)\s*returns\s*\(.*\)\s*(;|\{\s*\})\s*$")
_FIELD = re.compile(r"^(?:(?:repeated|optional)\s+)?(?:map\s*<[^>]+>|[\w.]+)\s+(\w+)\s*=\s*\d+\s*(\[.*\])?\s*;\s*$")
_VALUE = re.compile(r"^(\w+)\s*=\s*-?\d+\s*(\[.*\])?\s*;\s*$")
_PASSED = re.compile(r"^(syntax|package|import|option|reserved)\b.*;\s*$")


class ProtoError(ValueError):
    """A line of a .proto file outside the layout this scanner reads; the message names the place."""


@dataclass
class ProtoComments:
    package: str = ""
    file_comment: str = ""
    by_name: dict[str, str] = field(default_factory=dict)  # full name ("runtimekit.v1.Fault.severity") -> comment


def scan(path: Path) -> ProtoComments:
    """The comments of the .proto file at ``path`` (see the module doc)."""
    found = ProtoComments()
    scopes: list[tuple[str, str]] = []  # (kind, name)
    pending: list[str] = []
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        where = f"{path.name}:{number}"
        if line.startswith("//"):
            pending.append(line[2:].removeprefix(" "))
            continue
        if not line:
            pending = []
            continue
        comment = "\n".join(pending)
        pending = []
        named = [name for kind, name in scopes if kind != "oneof"]
        prefix = ".".join([found.package, *named]) if found.package else ".".join(named)
        if line.startswith("syntax") and not scopes:
            found.file_comment = comment
        if line.startswith("package "):
            found.package = line.removeprefix("package ").rstrip(";").strip()
            continue
        if _PASSED.match(line):
            continue
        opened = _OPEN.match(line)
        if opened:
            kind, name, closed = opened.groups()
            if kind != "oneof" or comment:
                found.by_name[f"{prefix}.{name}"] = comment
            if not closed:
                scopes.append((kind, name))
            continue
        if line == "}":
            if not scopes:
                raise ProtoError(f"{where}: a '}}' with no message, enum, service or oneof open")
            scopes.pop()
            continue
        kind = scopes[-1][0] if scopes else ""
        matched = (_RPC.match(line) if kind == "service" else _VALUE.match(line) if kind == "enum"
                   else _FIELD.match(line) if kind in ("message", "oneof") else None)
        if matched is None:
            raise ProtoError(f"{where}: not a declaration on one line that this scanner reads: {line!r}")
        found.by_name[f"{prefix}.{matched.group(1)}"] = comment
    if scopes:
        raise ProtoError(f"{path.name}: {scopes[-1][0]} {scopes[-1][1]} is never closed")
    return found
