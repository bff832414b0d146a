"""The Dockerfile, checked without Docker: a pinned base, a builder stage whose COPY lines bring
everything the wheel needs (the folders runtimekit/'s symbolic links point to included), a final
stage without the source that runs as a non-root user, and the wheel built from exactly what the
builder copies holds runtimekit.exporter, runtimekit.healthcheck's data and nothing at top level."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from deploy_files import ROOT, Copy, Stage, console_scripts, copies, dockerfile_stages, exec_form

# A tag with a patch release (python:3.11.13-slim-bookworm), or a digest: never a moving tag.
PINNED = re.compile(r"^[\w./-]+:\d+\.\d+\.\d+[\w.-]*(@sha256:[0-9a-f]{64})?$|^[\w./-]+(:[\w.-]+)?@sha256:[0-9a-f]{64}$")


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return dockerfile_stages()


@pytest.fixture(scope="module")
def builder(stages) -> Stage:
    """The first stage: the one that copies the source and builds the wheel."""
    return stages[0]


def test_wheel_is_built_in_a_builder_stage(stages):
    assert len(stages) >= 2, "build the wheel in a builder stage, install it in the final stage"
    assert any("pip wheel" in run for run in stages[0].all("RUN")), "the builder stage runs pip wheel"


def context_copies(stage: Stage) -> list[Copy]:
    return [c for c in copies(stage) if c.from_stage is None]


def test_base_images_are_pinned(stages):
    named = {s.name for s in stages if s.name}
    for stage in stages:
        if stage.base in named:
            continue
        assert PINNED.match(stage.base), f"FROM {stage.base}: pin a patch release or a digest"


def test_every_copy_source_exists(stages):
    for stage in stages:
        for copy in context_copies(stage):
            for source in copy.sources:
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"


def test_builder_keeps_the_repository_layout(builder):
    """So the relative symbolic links (runtimekit/exporter -> ../exporter) resolve in the image."""
    workdir = builder.last("WORKDIR")
    assert workdir, "the builder needs a WORKDIR"
    for copy in context_copies(builder):
        if len(copy.sources) == 1 and (ROOT / copy.sources[0]).is_dir():
            assert os.path.normpath(copy.destination) == os.path.normpath(copy.sources[0]), (
                f"COPY {copy.sources[0]} {copy.destination}: copy folders to the same place")
        else:
            assert copy.destination.rstrip("/") in (".", workdir.rstrip("/")), (
                f"COPY {' '.join(copy.sources)} {copy.destination}: files go to the WORKDIR")


def copied_paths(stage: Stage) -> set[Path]:
    return {(ROOT / source).resolve() for copy in context_copies(stage) for source in copy.sources}


def test_every_symlink_target_is_copied(builder):
    copied = copied_paths(builder)
    links = [p for source in list(copied) if source.is_dir() for p in source.rglob("*") if p.is_symlink()]
    assert links, "runtimekit/ should hold the links to exporter/, healthcheck/, slicer/"
    for link in links:
        target = (link.parent / os.readlink(link)).resolve()
        assert any(target == c or c in target.parents for c in copied), (
            f"{link.relative_to(ROOT)} -> {os.readlink(link)}: the Dockerfile does not copy its target")


def test_final_stage_has_no_source_and_runs_as_non_root(stages, builder):
    final = stages[-1]
    assert not context_copies(final), "the final stage copies only the builder's wheels"
    assert any(c.from_stage == (builder.name or "0") for c in copies(final))
    user = final.last("USER")
    assert user and user.split(":")[0] not in ("0", "root"), "run as a non-root user by default"


def test_entrypoint_is_the_installed_command(stages):
    entrypoint = exec_form(stages[-1].last("ENTRYPOINT") or "[]")
    assert entrypoint and entrypoint[0] in console_scripts()


@pytest.fixture(scope="module")
def wheel(builder, tmp_path_factory) -> zipfile.ZipFile:
    """A wheel built (`pip wheel --no-deps`) from a build context holding only what the builder
    stage copies, laid out as in the image -- the symbolic links copied as links."""
    context = tmp_path_factory.mktemp("context")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for copy in context_copies(builder):
        for source in copy.sources:
            path = ROOT / source
            destination = context / (os.path.normpath(copy.destination) if path.is_dir() else path.name)
            if path.is_dir():
                shutil.copytree(path, destination, symlinks=True, ignore=ignore)
            else:
                shutil.copy2(path, destination)
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q",
                           "-w", str(out), str(context)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (built,) = out.glob("runtimekit-*.whl")
    return zipfile.ZipFile(built)


def test_wheel_holds_the_linked_packages_under_runtimekit(wheel):
    names = set(wheel.namelist())
    assert "runtimekit/exporter/__init__.py" in names
    assert "runtimekit/healthcheck/thresholds.yaml" in names
    for link in (ROOT / "runtimekit").iterdir():
        if link.is_symlink() and (link / "__init__.py").exists():
            assert f"runtimekit/{link.name}/__init__.py" in names, f"runtimekit/{link.name} is missing from the wheel"


def test_wheel_installs_nothing_else_at_top_level(wheel):
    top = {name.split("/")[0] for name in wheel.namelist()}
    dist_info = {name for name in top if name.endswith(".dist-info")}
    assert len(dist_info) == 1 and top - dist_info == {"runtimekit"}, f"top level of the wheel: {sorted(top)}"


def test_wheel_provides_the_entrypoint_command(wheel):
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    for command, target in console_scripts().items():
        assert re.search(rf"^{re.escape(command)}\s*=\s*{re.escape(target)}\s*$", text, re.M), text
