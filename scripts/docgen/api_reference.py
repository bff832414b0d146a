"""docs/reference/api.md: the gRPC API runtimekit.v1, generated from proto/runtimekit/v1/*.proto.

What exists (services, RPCs, messages, fields with their numbers and types, enums and values) is
read from the generated descriptors (runtimekit/_proto, which tests/api checks against the .proto
files); what it means is the comment above each declaration in the .proto file
(``proto_comments``). A declaration without a comment stops the generator naming it: buf lint's
COMMENTS rule requires one, and a reference with a blank would hide it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .markdown import anchor, code, generated_header, table
from .proto_comments import ProtoComments, scan

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto" / "runtimekit" / "v1"
FILES = ("service", "node", "slice")  # the order of the page: the service first, then what it speaks
MODULE = "runtimekit._proto.runtimekit.v1.{}_pb2"

# FieldDescriptor.type -> the .proto scalar name
SCALARS = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32", 8: "bool",
           9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64"}


class Comments:
    """Every file's comments, looked up by full name; a missing one is an error naming it."""

    def __init__(self, scanned: dict[str, ProtoComments]) -> None:
        self._scanned = scanned
        self._all = {name: text for comments in scanned.values() for name, text in comments.by_name.items()}

    def of(self, full_name: str) -> str:
        text = self._all.get(full_name, "")
        if not text.strip():
            raise ValueError(f"docgen: {full_name} has no comment in {PROTO_DIR.relative_to(ROOT)} (buf lint's COMMENTS "
                             "rule requires one)")
        return " ".join(text.split())

    def file(self, stem: str) -> str:
        return self._scanned[stem].file_comment


def render() -> str:
    comments = Comments({stem: scan(PROTO_DIR / f"{stem}.proto") for stem in FILES})
    files = [importlib.import_module(MODULE.format(stem)).DESCRIPTOR for stem in FILES]
    package = files[0].package
    lines = generated_header(f"gRPC API reference: {package}", "proto/runtimekit/v1/*.proto")
    lines += ["How to reach it, authenticate and what changes may come: [docs/api.md](../api.md).", "",
              "```text", comments.file("service"), "```"]
    for descriptor in files:
        for service in descriptor.services_by_name.values():
            lines += _service(service, comments)
    messages = [m for d in files for m in _messages(d.message_types_by_name.values())]
    enums = [e for d in files for e in d.enum_types_by_name.values()] + [e for m in messages for e in m.enum_types]
    lines += ["", "## Messages"]
    for message in messages:
        lines += _message(message, comments, package)
    lines += ["", "## Enums"]
    for enum in enums:
        lines += ["", f"### {_local(enum.full_name, package)}", "", comments.of(enum.full_name), ""]
        lines += table(("Value", "Number", "Meaning"),
                       ((code(value.name), str(value.number), comments.of(f"{enum.full_name}.{value.name}"))
                        for value in enum.values))
    return "\n".join(lines) + "\n"


def _service(service: Any, comments: Comments) -> list[str]:
    lines = ["", f"## Service {service.name}", "", comments.of(service.full_name), ""]
    rows = []
    for method in service.methods:
        request = _link(method.input_type.full_name, service.file.package, stream=method.client_streaming)
        response = _link(method.output_type.full_name, service.file.package, stream=method.server_streaming)
        rows.append((code(method.name), request, response, comments.of(method.full_name)))
    return lines + table(("RPC", "Request", "Response", "Meaning"), rows)


def _messages(messages: Any) -> Iterator[Any]:
    """Messages in declaration order, each followed by its nested messages (map entries left out)."""
    for message in messages:
        if message.GetOptions().map_entry:
            continue
        yield message
        yield from _messages(message.nested_types)


def _message(message: Any, comments: Comments, package: str) -> list[str]:
    lines = ["", f"### {_local(message.full_name, package)}", "", comments.of(message.full_name)]
    if not message.fields:
        return lines + ["", "No fields."]
    rows = [(code(field.name), str(field.number), _field_type(field, package), comments.of(field.full_name))
            for field in message.fields]
    return lines + [""] + table(("Field", "Number", "Type", "Meaning"), rows)


def _field_type(field: Any, package: str) -> str:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        return f"map<{_field_type(key, package)}, {_field_type(value, package)}>"
    if field.message_type is not None:
        name = _link(field.message_type.full_name, package)
    elif field.enum_type is not None:
        name = _link(field.enum_type.full_name, package)
    else:
        name = SCALARS[field.type]
    oneof = field.containing_oneof
    if field.is_repeated:
        return f"repeated {name}"
    if oneof is not None and oneof.name == f"_{field.name}" and len(oneof.fields) == 1:  # proto3 optional
        return f"optional {name}"
    if oneof is not None:
        return f"{name} (oneof {oneof.name})"
    return name


def _local(full_name: str, package: str) -> str:
    return full_name.removeprefix(package + ".")


def _link(full_name: str, package: str, stream: bool = False) -> str:
    """A type as a link to its section when it is ours, else its full name."""
    prefix = "stream " if stream else ""
    if not full_name.startswith(package + "."):
        return f"{prefix}{full_name}"
    local = _local(full_name, package)
    return f"{prefix}[{local}](#{anchor(local)})"
