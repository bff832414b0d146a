"""The generated files (scripts/gen-docs: the configuration, metrics and API references in
docs/reference/, the monitoring component's copies of the alert rules and dashboards) are
regenerated from the code and compared with what is checked in, so they never drift; and the
metrics reference lists every family of every golden exposition (tests/golden/*.prom) and at least
one family of every collector."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from deploy_files import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

from docgen import metrics_reference  # noqa: E402 - scripts/ is not a package root
from docgen.targets import targets  # noqa: E402

from runtimekit.exporter.registry import COLLECTORS  # noqa: E402

TARGETS = targets()
METRICS = "docs/reference/metrics.md"
GOLDEN = ROOT / "tests" / "golden"


@pytest.fixture(scope="module")
def catalogue() -> dict[str, dict[str, Any]]:
    """The families a real agent on the simulated node builds (one run, about ten seconds)."""
    return metrics_reference.collect_catalogue()


def checked_in(path: str) -> str:
    target = ROOT / path
    assert target.is_file(), f"{path} is missing: run scripts/gen-docs"
    return target.read_text()


@pytest.mark.parametrize("path", [p for p in TARGETS if p != METRICS])
def test_generated_file_is_current(path):
    assert checked_in(path) == TARGETS[path](), f"{path} is not current: run scripts/gen-docs"


def test_metrics_reference_is_current(catalogue):
    assert checked_in(METRICS) == metrics_reference.render(catalogue), f"{METRICS} is not current: run scripts/gen-docs"


def test_metrics_reference_lists_every_family_of_every_golden_exposition(catalogue):
    goldens = sorted(GOLDEN.glob("*.prom"))
    assert len(goldens) >= 5
    for golden in goldens:
        for line in golden.read_text().splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split()
                assert name in catalogue, f"{golden.name}: {name} is not in the metrics reference"
                assert catalogue[name]["type"] == kind, f"{golden.name}: {name} is a {kind}"


def test_every_collector_builds_families(catalogue):
    built = {family["collector"] for family in catalogue.values()}
    assert set(COLLECTORS) <= built, f"collectors that built nothing in the run: {sorted(set(COLLECTORS) - built)}"


def test_gen_docs_check_names_a_stale_file(tmp_path, monkeypatch):
    """``scripts/gen-docs --check`` changes nothing and names what differs (the API reference here,
    compared under a copy of the repository's layout)."""
    from docgen import __main__ as gen_docs

    path = "docs/reference/api.md"
    (tmp_path / path).parent.mkdir(parents=True)
    (tmp_path / path).write_text("stale\n")
    monkeypatch.setattr(gen_docs, "ROOT", Path(tmp_path))
    assert gen_docs.main(["--check", path]) == 1
    assert (tmp_path / path).read_text() == "stale\n"
    assert gen_docs.main([path]) == 0 and gen_docs.main(["--check", path]) == 0
