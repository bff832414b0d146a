"""runtimekit.v1's compatibility, checked by buf (proto/buf.yaml): lint (STANDARD and COMMENTS),
and breaking (FILE) against the committed snapshot of the released v1 (tests/api/released/). Each
check is shown to bite: a copy of proto/ with one deliberate fault, in a temporary folder, fails it."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto"
RELEASED = ROOT / "tests" / "api" / "released"
SERVICE = "runtimekit/v1/service.proto"
SLICE = "runtimekit/v1/slice.proto"


def run_buf(buf: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([buf, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


def broken_copy(tmp_path: Path, file: str, old: str, new: str) -> Path:
    """proto/ copied to ``tmp_path`` with ``old`` replaced by ``new`` in ``file`` (which must hold it)."""
    copy = tmp_path / "proto"
    shutil.copytree(PROTO, copy)
    text = (copy / file).read_text()
    assert old in text, f"{file} no longer holds {old!r}: update this test"
    (copy / file).write_text(text.replace(old, new, 1))
    return copy


def test_buf_lint_passes(buf: str) -> None:
    result = run_buf(buf, "lint", "proto")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_module_is_runtimekit_v1_only(buf: str) -> None:
    result = run_buf(buf, "ls-files", "proto")
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == sorted(f"proto/{p.relative_to(PROTO)}" for p in (PROTO / "runtimekit").rglob("*.proto"))


def test_buf_breaking_against_the_released_v1_passes(buf: str) -> None:
    result = run_buf(buf, "breaking", "proto", "--against", str(RELEASED))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("file,old,new,reported", [
    (SERVICE, "string owner_id = 7;", "string owner_id = 11;", 'Previously present field "7" with name "owner_id"'),
    (SLICE, "  uint64 memory_bytes = 8;\n", "", 'Previously present field "8" with name "memory_bytes"'),
    (SLICE, "string cdi_device = 14;", "bytes cdi_device = 14;", 'changed type from "string" to "bytes"'),
    (SERVICE, "  rpc GetSlice(GetSliceRequest) returns (GetSliceResponse);\n", "", 'Previously present RPC "GetSlice"'),
], ids=["field-renumbered", "field-removed", "field-type-changed", "rpc-removed"])
def test_buf_breaking_reports_a_broken_copy(buf: str, tmp_path: Path, file: str, old: str, new: str, reported: str) -> None:
    copy = broken_copy(tmp_path, file, old, new)
    result = run_buf(buf, "breaking", str(copy), "--against", str(RELEASED))
    assert result.returncode != 0
    assert reported in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("file,old,new,reported", [
    (SLICE, "SLICE_STATE_UNSPECIFIED = 0;", "SLICE_STATE_NONE = 0;", "ENUM_ZERO_VALUE_SUFFIX"),
    (SLICE, "  // The slice's id: \"s-\" and 12 lower-case hexadecimal digits.\n", "", "COMMENT_FIELD"),
    (SERVICE, "returns (GetSliceResponse)", "returns (Slice)", "RPC_RESPONSE_STANDARD_NAME"),
], ids=["enum-zero-value", "undocumented-field", "response-not-per-rpc"])
def test_buf_lint_reports_a_broken_copy(buf: str, tmp_path: Path, file: str, old: str, new: str, reported: str) -> None:
    copy = broken_copy(tmp_path, file, old, new)
    result = run_buf(buf, "lint", str(copy), "--error-format", "json")
    assert result.returncode != 0
    rules = {json.loads(line)["type"] for line in result.stdout.splitlines() if line.strip()}
    assert rules == {reported}, result.stdout + result.stderr


def _without_json_names(file: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    """``file`` less what only buf writes: its fields' json_name, and fields unknown to protobuf's
    descriptor.proto (buf's image extensions)."""
    def strip(messages) -> None:
        for message in messages:
            for field in message.field:
                field.ClearField("json_name")
            strip(message.nested_type)

    strip(file.message_type)
    file.DiscardUnknownFields()
    return file


def test_the_generated_code_is_current(buf: str, tmp_path: Path) -> None:
    """runtimekit/_proto/runtimekit/v1 holds what scripts/gen-protos makes of proto/ now: the
    descriptors compiled into each *_pb2.py are the ones buf builds from the .proto files."""
    image = tmp_path / "image.binpb"
    result = run_buf(buf, "build", "proto", "--exclude-source-info", "--exclude-imports", "-o", str(image))
    assert result.returncode == 0, result.stderr
    built = descriptor_pb2.FileDescriptorSet.FromString(image.read_bytes())
    assert sorted(file.name for file in built.file) == ["runtimekit/v1/node.proto", SERVICE, SLICE]
    for file in built.file:
        module = importlib.import_module("runtimekit._proto." + file.name.removesuffix(".proto").replace("/", ".") + "_pb2")
        generated = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
        assert _without_json_names(generated) == _without_json_names(file), f"{file.name}: run scripts/gen-protos"
