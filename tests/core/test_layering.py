"""The house rules of docs/architecture.md, read from the code's own imports (lazy ones included).

- The base (runtimekit/ less the command line, the composition root and the simulator) imports no
  reader (exporter, healthcheck, slicer, topology, kube) and no simulator.
- The readers import the simulator nowhere, and one another nowhere: they meet in the state.
- The container layer (kube/) reaches the node's rooms only through the API, never their code.
- Production code imports the simulator only where the command line registers it.
- The rooms are imported under the runtimekit namespace only (no top-level ``exporter``).
- No source file is over MAX_LINES lines (generated code aside).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
READERS = ("exporter", "healthcheck", "slicer", "topology", "kube")
ROOMS = {"exporter": ROOT / "exporter", "healthcheck": ROOT / "healthcheck", "slicer": ROOT / "slicer",
         "topology": ROOT / "topology", "kube": ROOT / "kube", "runtimekit": ROOT / "runtimekit"}
COMPOSITION = {"runtimekit/cli.py", "runtimekit/service.py", "runtimekit/components.py"}
SIM_REGISTRAR = {"runtimekit/cli.py"}
MAX_LINES = 450  # "files under ~400 lines": the same margin ../shared/tools/layering.py allows


def sources() -> list[tuple[str, Path]]:
    """(path relative to the root, file) of every hand-written source file of the rooms."""
    found = []
    for folder in ROOMS.values():
        if not folder.is_dir():
            continue
        for path in folder.rglob("*.py"):
            relative = path.relative_to(ROOT).as_posix()
            linked = relative.startswith("runtimekit/") and relative.split("/")[1] in READERS
            if "_proto" in relative or linked:
                continue  # generated code; and the links runtimekit/<room> are read as <room>/
            found.append((relative, path))
    return found


def imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def room_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "runtimekit" and len(parts) > 1 and parts[1] in (*READERS, "sim"):
        return parts[1]
    if parts[0] == "runtimekit":
        return "base"
    return None


def problems() -> list[str]:
    found = []
    for relative, path in sources():
        top = relative.split("/")[0]
        here = top if top in READERS else ("sim" if relative.startswith("runtimekit/sim/") else "base")
        for module in imports(path):
            if module.split(".")[0] in READERS:
                found.append(f"{relative} imports {module} (use runtimekit.{module})")
            target = room_of(module)
            if target is None or target == here:
                continue
            if here == "base" and relative not in COMPOSITION and target != "base":
                found.append(f"base {relative} imports {module}")
            if target == "sim" and here != "sim" and relative not in SIM_REGISTRAR:
                found.append(f"{relative} imports the simulator ({module})")
            if here in READERS and target in READERS:
                found.append(f"reader {relative} imports another reader ({module})")
    return found


def test_the_house_rules_hold() -> None:
    assert problems() == []


@pytest.mark.parametrize("relative,path", sources(), ids=lambda value: str(value))
def test_no_file_is_too_long(relative: str, path: Path) -> None:
    lines = sum(1 for _ in path.open(encoding="utf-8"))
    assert lines <= MAX_LINES, f"{relative} has {lines} lines: split it along a real seam"
