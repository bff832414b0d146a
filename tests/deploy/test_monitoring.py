"""The monitoring component, as kubectl renders the overlays that hold it: the ServiceMonitor scrapes
the agent's Service on its metrics port with the labels the alert rules expect (job, node), the
PrometheusRule carries exactly the groups of alerts/runtimekit.rules.yml, and the dashboards
ConfigMap holds every dashboard of dashboards/grafana as it is there."""

from __future__ import annotations

import re

import pytest
import yaml
from deploy_files import ROOT, find
from rendered import holding, installations, render

INSTALLATIONS = installations()
RULES = ROOT / "alerts" / "runtimekit.rules.yml"
DASHBOARDS = ROOT / "dashboards" / "grafana"

MONITORED = holding("monitoring")
with_monitoring = pytest.mark.parametrize("name", MONITORED)


def test_an_overlay_holds_the_monitoring_component():
    assert MONITORED


@with_monitoring
def test_the_service_monitor_scrapes_the_agent_with_the_labels_the_alerts_expect(name):
    documents = render(INSTALLATIONS[name])
    monitor = find(documents, "ServiceMonitor", "runtimekit-agent")
    service = find(documents, "Service", "runtimekit-agent")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    jobs = set(re.findall(r'job="([^"]+)"', RULES.read_text()))
    relabel = {r["targetLabel"]: r for r in endpoint["relabelings"] if "targetLabel" in r}
    assert jobs == {relabel["job"]["replacement"]}, "the alert rules name the job: the ServiceMonitor sets it"
    assert relabel["node"]["sourceLabels"] == ["__meta_kubernetes_pod_node_name"], "alerts and runbooks group by node"
    assert endpoint.get("honorLabels") is True, "the agent's own labels (gpu, pod, namespace) are kept"
    dropped = [re.compile(r["regex"]) for r in endpoint["relabelings"] if r["action"] == "labeldrop"]
    for target_label in ("namespace", "pod", "container", "service", "endpoint"):  # what the operator adds
        assert any(p.fullmatch(target_label) for p in dropped), f"the agent pod's {target_label} would label every series"
    assert not any(p.fullmatch(kept) for p in dropped for kept in ("job", "instance", "node"))


@with_monitoring
def test_the_prometheus_rule_is_the_alert_rules(name):
    rule = find(render(INSTALLATIONS[name]), "PrometheusRule", "runtimekit")
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]


@with_monitoring
def test_the_dashboards_config_map_holds_every_dashboard(name):
    config_map = find(render(INSTALLATIONS[name]), "ConfigMap", "runtimekit-dashboards")
    assert config_map["metadata"]["labels"].get("grafana_dashboard") == "1", "Grafana's dashboard sidecar looks for it"
    expected = {path.name: path.read_text() for path in DASHBOARDS.glob("*.json")}
    assert config_map["data"] == expected, "list every dashboards/grafana/*.json in monitoring/kustomization.yaml"
