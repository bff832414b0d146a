"""Readers for the deployment files (Kubernetes objects, the Dockerfile, the systemd unit), so
tests/deploy/ can check them against the code without Docker, a cluster or systemd. The
Kubernetes objects are those ``kubectl kustomize`` renders (rendered.py)."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
SYSTEMD_UNIT = ROOT / "deploy" / "systemd" / "runtimekit.service"
DOCKERFILE = ROOT / "Dockerfile"


def console_scripts() -> dict[str, str]:
    """``[project.scripts]`` of pyproject.toml: the commands an installed runtimekit provides."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


# ---- Kubernetes --------------------------------------------------------------------------------

def find(documents: Sequence[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in documents if d.get("kind") == kind and d.get("metadata", {}).get("name") == name]
    assert len(found) == 1, f"expected one {kind} {name!r}, found {len(found)}"
    return found[0]


def mount_of(container: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The volumeMount of ``container`` that holds ``path`` (the deepest one), or None."""
    holding = [m for m in container.get("volumeMounts", [])
               if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")]
    return max(holding, key=lambda m: len(m["mountPath"]), default=None)


def volume(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
    found = [v for v in pod_spec.get("volumes", []) if v["name"] == name]
    assert len(found) == 1, f"volume {name!r}: expected one, found {len(found)}"
    return found[0]


def host_path_of(pod_spec: dict[str, Any], container: dict[str, Any], path: str) -> tuple[str, dict[str, Any]] | None:
    """The node's path behind ``path`` in the container, and its mount; None when ``path`` is in no
    mount or in a mount that is not a hostPath."""
    mount = mount_of(container, path)
    if mount is None:
        return None
    source = volume(pod_spec, mount["name"]).get("hostPath")
    if source is None:
        return None
    rest = path[len(mount["mountPath"].rstrip("/")):]
    base = source["path"].rstrip("/") if rest else source["path"]
    return base + rest, mount


def config_map_file(documents: Sequence[dict[str, Any]], namespace: str | None, pod_spec: dict[str, Any],
                    container: dict[str, Any], path: str) -> str:
    """The text of the file ``path`` that a ConfigMap volume of ``container`` (in ``namespace``) provides."""
    mount = mount_of(container, path)
    assert mount is not None, f"{path} is in no volumeMount of container {container['name']!r}"
    source = volume(pod_spec, mount["name"]).get("configMap")
    assert source is not None, f"{path} is mounted from volume {mount['name']!r}, which is not a ConfigMap"
    if "subPath" in mount:
        key = mount["subPath"]
    else:
        relative = path[len(mount["mountPath"].rstrip("/")) + 1:]
        items = {item["path"]: item["key"] for item in source.get("items", [])}
        key = items.get(relative, relative) if items else relative
    config_map = find([d for d in documents if d.get("metadata", {}).get("namespace") in (namespace, None)],
                      "ConfigMap", source["name"])
    assert key in config_map.get("data", {}), f"ConfigMap {source['name']!r} has no key {key!r}"
    return config_map["data"][key]


# ---- Dockerfile --------------------------------------------------------------------------------

@dataclass
class Stage:
    base: str  # the image, ARG defaults substituted
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)  # (INSTRUCTION, arguments)

    def all(self, instruction: str) -> list[str]:
        return [args for name, args in self.instructions if name == instruction]

    def last(self, instruction: str) -> str | None:
        found = self.all(instruction)
        return found[-1] if found else None


@dataclass(frozen=True)
class Copy:
    sources: tuple[str, ...]
    destination: str
    from_stage: str | None


def dockerfile_stages(path: Path = DOCKERFILE) -> list[Stage]:
    """The stages of a Dockerfile: continuation lines joined, comments dropped, ARG defaults
    given before the first FROM substituted into FROM lines."""
    lines: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    assert not pending, "the Dockerfile ends in a continuation line"
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        instruction, _, rest = line.partition(" ")
        instruction, rest = instruction.upper(), rest.strip()
        if instruction == "ARG" and not stages:
            arg, _, default = rest.partition("=")
            args[arg] = default
        elif instruction == "FROM":
            words = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m[1] or m[2], m[0]), rest).split()
            words = [w for w in words if not w.startswith("--")]  # --platform=...
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name))
        else:
            assert stages, f"{instruction} before the first FROM"
            stages[-1].instructions.append((instruction, rest))
    return stages


def exec_form(arguments: str) -> list[str]:
    """The JSON (exec) form of ENTRYPOINT or CMD; shell form is refused (signals would go to sh)."""
    value = json.loads(arguments)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), f"not exec form: {arguments}"
    return value


def copies(stage: Stage) -> list[Copy]:
    found = []
    for arguments in stage.all("COPY"):
        words = shlex.split(arguments)
        flags = [w for w in words if w.startswith("--")]
        paths = [w for w in words if not w.startswith("--")]
        from_stage = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
        found.append(Copy(tuple(paths[:-1]), paths[-1], from_stage))
    return found


# ---- systemd -----------------------------------------------------------------------------------

def systemd_unit(path: Path = SYSTEMD_UNIT) -> dict[str, dict[str, list[str]]]:
    """section -> key -> values (a key may repeat), as systemd reads a unit file."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{line!r} before the first section"
        key, sep, value = line.partition("=")
        assert sep, f"not KEY=VALUE: {line!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def exec_start_argv(value: str) -> list[str]:
    """ExecStart's command line, without systemd's prefixes (-, @, :, +, !)."""
    argv = shlex.split(value)
    argv[0] = argv[0].lstrip("-@:+!")
    return argv


# ---- command lines -----------------------------------------------------------------------------

def container_argv(container: dict[str, Any]) -> list[str]:
    """A container's command line: its command (or the image's ENTRYPOINT), then its args (or,
    without a command of its own, the image's CMD) -- as Kubernetes combines them."""
    final = dockerfile_stages()[-1]
    entrypoint = exec_form(final.last("ENTRYPOINT") or "[]")
    cmd = exec_form(final.last("CMD") or "[]")
    if "command" in container:
        return [*container["command"], *container.get("args", [])]
    return [*entrypoint, *container.get("args", cmd)]


def parse_command_line(argv: list[str]) -> argparse.Namespace:
    """``argv`` as the installed ``runtimekit`` parses it (``runtimekit.cli.parser()``); a usage
    error fails the test with the command line."""
    from runtimekit import cli

    assert argv, "empty command line"
    assert Path(argv[0]).name in console_scripts(), f"{argv[0]!r} is not a command pyproject.toml installs"
    try:
        return cli.parser().parse_args(argv[1:])
    except SystemExit as exit:
        pytest.fail(f"`{' '.join(argv)}` is not a valid runtimekit command line (exit {exit.code})")
