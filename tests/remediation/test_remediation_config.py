"""The configuration and the ladder table: keyed by the agent's action names, checked against the
shipped alert rules, and documented key by key in deploy/remediation.example.yaml."""

import pytest
import yaml
from conftest import alert_body

from runtimekit.kube.remediation.actions import plan, replacement_body
from runtimekit.kube.remediation.config import SCHEMA, ConfigError, load
from runtimekit.kube.remediation.journal import Action
from runtimekit.kube.remediation.ladders import DEFAULT_LADDERS, STEPS
from runtimekit.kube.remediation.payload import parse
from runtimekit.schema import flatten, value_at
from runtimekit.state.health import ACTIONS, SEVERITIES
from tests.agent_process import ROOT

EXAMPLE = ROOT / "deploy" / "remediation.example.yaml"
RULES = ROOT / "alerts" / "runtimekit.rules.yml"


def _config(**overrides):
    return load(None, {"auth.token_file": "t", **overrides})


def _alert(action, alertname="AnyName", **labels):
    body = alert_body(action=action)
    body["alerts"][0]["labels"].update(alertname=alertname, **labels)
    return parse(body).alerts[0]


def _shipped_alerts():
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_the_default_table_has_one_ladder_per_action_name():
    assert list(DEFAULT_LADDERS) == list(ACTIONS)
    assert _config().ladders == DEFAULT_LADDERS
    assert all(steps == sorted(steps, key=STEPS.index) for steps in DEFAULT_LADDERS.values())


@pytest.mark.parametrize("action,steps", [
    ("none", None), ("restart_application", None), ("drain_and_reset_gpu", None),
    ("reboot_node", ["cordon", "taint", "replace"]), ("replace_node", ["cordon", "taint", "replace"]),
    ("cordon", None),  # a step is not an action (the old table had such a key)
    ("REPLACE_NODE", None), ("", None),
])
def test_the_ladder_follows_the_action_label(action, steps):
    planned = plan(_config(), _alert(action))
    assert (planned[1] if planned else None) == steps


def test_the_ladder_does_not_depend_on_the_alert_name():
    config = _config()
    names = ["RuntimeKitGPULost", "RuntimeKitGPURowRemapFailure", "SomethingNew", "GpuXid79"]
    assert {tuple(plan(config, _alert("replace_node", name))[1]) for name in names} == {("cordon", "taint", "replace")}
    assert {plan(config, _alert("drain_and_reset_gpu", name)) for name in names} == {None}


def test_a_configured_ladder_replaces_only_its_own_entry():
    config = _config(ladders={"replace_node": ["cordon", "taint", "drain", "replace"], "reboot_node": []})
    assert config.ladders["replace_node"] == ["cordon", "taint", "drain", "replace"]
    assert config.ladders["reboot_node"] == []
    assert plan(config, _alert("reboot_node")) is None
    assert config.ladders["none"] == []


@pytest.mark.parametrize("ladders,message", [
    ({"GpuXid79": ["cordon"]}, "ladders: entry 'GpuXid79': must be an action name"),
    ({"cordon": ["cordon"]}, "ladders: entry 'cordon': must be an action name"),
    ({"reboot_node": "cordon"}, "ladders: entry 'reboot_node': must map an action to a list"),
    ({"reboot_node": ["reboot"]}, "step 'reboot' is not one of cordon, taint, drain, replace"),
    ({"reboot_node": ["replace", "cordon"]}, "steps must keep the order"),
])
def test_bad_ladders_are_refused_naming_the_key(ladders, message):
    with pytest.raises(ConfigError, match=message):
        _config(ladders=ladders)


def test_every_shipped_alert_carries_an_action_name_and_a_severity():
    alerts = _shipped_alerts()
    assert alerts
    for rule in alerts:
        labels = rule.get("labels", {})
        assert labels.get("action") in ACTIONS, f"{rule['alert']}: action label {labels.get('action')!r}"
        assert labels.get("severity") in SEVERITIES, rule["alert"]


def test_alerts_the_default_table_acts_on_are_node_or_gpu_alerts_with_the_labels_read():
    """An alert with a ladder is about a node (or a GPU of it): its expression keeps `node`, and a
    GPU alert keeps `uuid` and `gpu` — the labels the service reads (not `gpu_uuid`)."""
    acted = [r for r in _shipped_alerts() if DEFAULT_LADDERS[r["labels"]["action"]]]
    assert {r["alert"] for r in acted} >= {"RuntimeKitGPURebootNode", "RuntimeKitGPUReplaceNode"}
    for rule in acted:
        expr = rule["expr"]
        assert "gpu_uuid" not in expr
        if "by (" in expr or "on (" in expr:
            assert "node" in expr, rule["alert"]
    reboot = next(r for r in acted if r["alert"] == "RuntimeKitGPURebootNode")
    assert "on (job, instance, node, gpu, uuid)" in reboot["expr"]


def test_the_spare_node_request_names_the_gpus_from_uuid_and_gpu_labels():
    config = _config()
    action = Action(1, "fp1", "2026-01-01T00:00:00Z", "gpu-1", "replace", "pending", 0, "rk-x", None, 0.0, 0.0)
    labels = {"uuid": "GPU-3a0c", "gpu": "3", "alertname": "RuntimeKitGPULost", "gpu_uuid": "ignored"}
    body = replacement_body(config, action, labels)
    assert body == {"node": "gpu-1", "gpu_uuids": ["GPU-3a0c"], "gpu_indices": ["3"], "fault": "RuntimeKitGPULost",
                    "alert_fingerprint": "fp1"}
    node_level = replacement_body(config, action, {"alertname": "RuntimeKitNodeNVMLDown"})
    assert node_level["gpu_uuids"] == [] and node_level["gpu_indices"] == []


def test_the_old_gpu_label_key_is_refused():
    with pytest.raises(ConfigError, match="gpu_label: unknown key"):
        _config(gpu_label="gpu_uuid")


def test_min_nodes_above_max_nodes_is_refused():
    with pytest.raises(ConfigError, match=r"breaker.min_nodes: must be at most breaker.max_nodes \(3\), got 4"):
        _config(**{"breaker.min_nodes": 4})


def test_the_example_lists_exactly_the_schema_keys_with_their_defaults():
    data = yaml.safe_load(EXAMPLE.read_text())
    flat = flatten(data, SCHEMA)
    assert set(flat) == set(SCHEMA), f"missing {set(SCHEMA) - set(flat)}, unknown {set(flat) - set(SCHEMA)}"
    config = load(EXAMPLE)
    for key, spec in SCHEMA.items():
        if key == "auth.token_file":  # the one key that must be set (the receiver never runs without auth)
            assert config.auth.token_file
            continue
        assert value_at(config, key) == spec.default, key


def test_the_example_comments_every_key():
    """Each key's own line carries a comment: its meaning, and its range where it has one."""
    lines = EXAMPLE.read_text().splitlines()
    for key in SCHEMA:
        prefix = "  " * key.count(".") + key.split(".")[-1] + ":"
        line = next((line for line in lines if line.startswith(prefix)), None)
        assert line is not None and "#" in line, f"{key}: no commented line in the example"


def test_alertmanager_sends_exactly_the_actions_whose_ladder_acts():
    """The shipped route's `action` matcher and the default ladder table agree: an action with a
    ladder that Alertmanager never sends, or one sent for nothing, is a configuration drift."""
    import re

    route = yaml.safe_load((ROOT / "deploy" / "alertmanager" / "alertmanager.yml").read_text())["route"]["routes"][0]
    assert route["receiver"] == "gpu-remediation"
    matcher = next(m for m in route["matchers"] if m.replace(" ", "").startswith("action=~"))
    pattern = matcher.split("=~", 1)[1].strip().strip('"')
    sent = {action for action in ACTIONS if re.fullmatch(pattern, action)}
    assert sent == {action for action, steps in DEFAULT_LADDERS.items() if steps}


@pytest.mark.parametrize("value,message", [
    ("bad key!", "taint_key: the name part must be 1-63 characters"),
    ("", "taint_key: must not be empty"),
    ("example.com/", "taint_key: the name part must be 1-63 characters"),
    ("/gpu", "taint_key: the prefix before '/' must be a DNS subdomain"),
    ("Example.com/gpu", "taint_key: the prefix before '/' must be a DNS subdomain"),
    ("a/b/c", "taint_key: must have at most one '/'"),
    ("-gpu", "taint_key: the name part must be 1-63 characters"),
    ("g" * 64, "taint_key: the name part must be 1-63 characters"),
])
def test_a_taint_key_kubernetes_would_refuse_is_refused_at_load(value, message):
    with pytest.raises(ConfigError, match=message):
        _config(taint_key=value)


@pytest.mark.parametrize("value", ["runtimekit.io/gpu-unhealthy", "gpu_unhealthy", "a", "example.com/A.b_c-9",
                                   "g" * 63, "x" * 63 + "." + "y" * 63 + "/z"])
def test_taint_keys_kubernetes_accepts_are_accepted(value):
    assert _config(taint_key=value).taint_key == value


@pytest.mark.parametrize("value,message", [
    ("http://", "replacement.url: must name a host"),
    ("https://exa mple.com/x", "replacement.url: must not contain spaces"),
    ("http://host:99999/", "replacement.url: the port must be 1-65535"),
    ("http://host:0/", "replacement.url: the port must be 1-65535"),
    ("http://host:port/", "replacement.url: the port must be 1-65535"),
    ("http://[::1/x", "replacement.url: not a URL"),
    ("http:///x", "replacement.url: must name a host"),
    ("ftp://host/x", "replacement.url: must be an http:// or https:// URL"),
    ("https://host/x\ty", "replacement.url: must not contain spaces"),
    ("https://user:secret@spare.example.com/r", "replacement.url: must not hold credentials"),
    ("https://ghp_token@spare.example.com/r", "replacement.url: must not hold credentials"),
    ("https://:secret@spare.example.com/r", "replacement.url: must not hold credentials"),
])
def test_a_replacement_url_no_request_can_go_to_is_refused_at_load(value, message):
    with pytest.raises(ConfigError, match=message):
        _config(**{"replacement.url": value})


@pytest.mark.parametrize("value", ["https://spare.example.com/api/v1/replacements", "http://127.0.0.1:8080/r?x=1",
                                   "http://[::1]:9/replace", "HTTPS://Spare.Example.com"])
def test_replacement_urls_with_a_host_are_accepted(value):
    assert _config(**{"replacement.url": value}).replacement.url == value


@pytest.mark.parametrize("key", ["node_label", "action_label", "gpu_uuid_label", "gpu_index_label", "fault_label"])
def test_an_empty_label_key_is_refused_at_load(key):
    with pytest.raises(ConfigError, match=f"^{key}: must name an alert label"):
        _config(**{key: ""})
