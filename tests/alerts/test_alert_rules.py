"""The Prometheus rules in alerts/: promtool-clean, unit-tested, documented, and mirrored in deploy/."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "alerts" / "runtimekit.rules.yml"
TESTS = sorted((ROOT / "alerts" / "tests").glob("*.yml"))
PROMETHEUSRULE = ROOT / "deploy" / "kubernetes" / "monitoring" / "prometheusrule.yaml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
SEVERITIES = {"critical", "warning", "info"}
ACTIONS = {"none", "restart_application", "drain_and_reset_gpu", "reboot_node", "replace_node"}
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
needs_promtool = pytest.mark.tool("promtool")  # missing: fails under CI, skips elsewhere (tests/conftest.py)


def _alerts() -> dict[str, dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def _anchors() -> set[str]:
    """GitHub-style anchors of the markdown headings in docs/runbooks.md."""
    out = set()
    for line in RUNBOOKS.read_text().splitlines():
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            out.add(text.replace(" ", "-"))
    return out


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@needs_promtool
def test_promtool_check_rules_is_clean() -> None:
    res = _run("check", "rules", str(RULES.relative_to(ROOT)))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout
    # no lint complaints (promtool prints them between the file name and SUCCESS)
    complaints = [ln for ln in (res.stdout + res.stderr).splitlines()
                  if ln.strip() and not ln.startswith("Checking") and "SUCCESS" not in ln]
    assert complaints == []


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    assert TESTS, "no promtool unit tests in alerts/tests/"
    res = _run("test", "rules", *(str(t.relative_to(ROOT)) for t in TESTS))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "FAILED" not in res.stdout + res.stderr
    assert res.stderr.strip() == ""


def test_every_alert_has_labels_annotations_and_a_runbook() -> None:
    alerts = _alerts()
    assert len(alerts) >= 12
    anchors = _anchors()
    for name, rule in alerts.items():
        labels, ann = rule.get("labels", {}), rule.get("annotations", {})
        assert labels.get("severity") in SEVERITIES, name
        assert labels.get("action") in ACTIONS, name
        for key in ("summary", "description", "runbook_url"):
            assert ann.get(key), f"{name}: no {key}"
        assert "$labels.node" in ann["summary"] + ann["description"], name
        assert ann["runbook_url"] == f"docs/runbooks.md#{name.lower()}", name
        assert name.lower() in anchors, f"{name}: no section in docs/runbooks.md"


def test_gpu_alerts_name_gpu_uuid_and_pods() -> None:
    for name, rule in _alerts().items():
        text = rule["annotations"]["summary"] + rule["annotations"]["description"]
        if "uuid" in rule["expr"] or "runtimekit_gpu_fault_active" in rule["expr"]:
            assert "$labels.gpu" in text and "$labels.uuid" in text, name
            assert "pod" in text.lower(), name


def test_application_xids_never_page() -> None:
    """XID 13 & co. are `info` in the agent's verdict; no critical alert selects info faults."""
    for name, rule in _alerts().items():
        if rule["labels"]["severity"] == "critical" and "runtimekit_gpu_fault_active" in rule["expr"]:
            assert 'severity="info"' not in rule["expr"], name


def _cases() -> dict[str, dict[str, int]]:
    seen: dict[str, dict[str, int]] = {}
    for path in TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test") or []:
                kind = "firing" if case.get("exp_alerts") else "quiet"
                counts = seen.setdefault(case["alertname"], {"firing": 0, "quiet": 0})
                counts[kind] += 1
    return seen


def test_every_alert_has_firing_and_quiet_unit_tests() -> None:
    seen = _cases()
    for name in _alerts():
        assert seen.get(name, {}).get("firing", 0) >= 1, f"{name}: no firing case"
        assert seen.get(name, {}).get("quiet", 0) >= 1, f"{name}: no not-firing case"
    assert set(seen) <= set(_alerts()), "unit tests name alerts that do not exist"


def test_prometheusrule_matches_the_rule_file() -> None:
    plain = yaml.safe_load(RULES.read_text())
    crd = yaml.safe_load(PROMETHEUSRULE.read_text())
    assert crd["apiVersion"] == "monitoring.coreos.com/v1"
    assert crd["kind"] == "PrometheusRule"
    assert crd["spec"]["groups"] == plain["groups"]


def test_prometheusrule_is_what_the_generator_writes() -> None:
    sys.path.insert(0, str(ROOT / "alerts"))
    try:
        import generate_prometheusrule
    finally:
        sys.path.pop(0)
    assert PROMETHEUSRULE.read_text() == generate_prometheusrule.render()


def test_the_policy_tests_are_what_their_generator_writes() -> None:
    """runtimekit_policy_test.yml is generated from the rules and healthcheck/policy.yaml: a policy
    edit (a fault's class, action or severity) must show in the routing tests, not pass unseen."""
    sys.path.insert(0, str(ROOT / "alerts" / "tests"))
    try:
        import generate_policy_tests
    finally:
        sys.path.pop(0)
    assert generate_policy_tests.TARGET.read_text() == generate_policy_tests.document(), (
        "alerts/tests/runtimekit_policy_test.yml is stale: run .venv/bin/python alerts/tests/generate_policy_tests.py")


def test_gpu_alerts_route_on_the_policys_labels_not_on_fault_lists() -> None:
    """GPU alerts select runtimekit_gpu_fault_active by action/class/severity; none copies the
    policy's fault or XID names (a regex on `fault`), and none aggregates gpu or uuid away."""
    for name, rule in _alerts().items():
        expr = rule["expr"]
        if "runtimekit_gpu_fault_active" not in expr:
            continue
        assert "fault=" not in expr and "fault!" not in expr, name
        assert re.search(r'(action|class)="[a-z_]+"', expr), name
        assert "by (" not in expr or "uuid" in expr, name


def test_contained_ecc_never_routes_to_a_node_action() -> None:
    sys.path.insert(0, str(ROOT))
    from runtimekit.healthcheck.policy import default_policy

    policy = default_policy()
    for fault in ("ecc_contained", "row_remap_pending"):
        p = policy.fault(fault)
        for name, rule in _alerts().items():
            expr = rule["expr"]
            if "runtimekit_gpu_fault_active" not in expr:
                continue
            selects = all(f'{key}="{value}"' in expr or f'{key}=' not in expr
                          for key, value in (("action", p.action), ("class", p.fault_class), ("severity", p.severity)))
            if selects:
                assert rule["labels"]["action"] not in ("replace_node", "reboot_node"), (fault, name)
                assert rule["labels"]["severity"] == "warning", (fault, name)
