"""The remediation service's logic, table by table: payloads, the journal, the breaker and the cooldown."""
import dataclasses

import pytest
from conftest import alert_body

from runtimekit.kube.remediation.breaker import BreakerPolicy, breaker_verdict, cooldown_verdict
from runtimekit.kube.remediation.journal import Journal, JournalError, reset_breaker
from runtimekit.kube.remediation.payload import PayloadError, parse


def _mutate(path, value):
    body = alert_body()
    target = body
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return body


@pytest.mark.parametrize("path,value,message", [
    (("version",), "3", "version: must be \"4\""),
    (("version",), KeyError, "version: required"),
    (("status",), "pending", "status: must be one of"),
    (("alerts",), {}, "alerts: expected a list"),
    (("alerts",), [1], "alerts[0]: expected a mapping"),
    (("receiver",), 3, "receiver: must be a string"),
    (("groupKey",), KeyError, "groupKey: required"),
    (("alerts", 0, "fingerprint"), "", "alerts[0].fingerprint"),
    (("alerts", 0, "startsAt"), "yesterday", "alerts[0].startsAt: must be an RFC 3339"),
    (("alerts", 0, "labels"), {"a": 1}, "alerts[0].labels.a: must be a string"),
    (("alerts", 0, "status"), "x", "alerts[0].status"),
    (("alerts", 0, "startsAt"), "", "alerts[0].startsAt: must be a non-empty RFC 3339"),
    (("alerts", 0, "startsAt"), KeyError, "alerts[0].startsAt: required"),
    (("alerts", 0, "endsAt"), "soon", "alerts[0].endsAt: must be an RFC 3339"),
    (("alerts", 0, "annotations"), [], "alerts[0].annotations: expected a mapping"),
    (("alerts", 0, "generatorURL"), 1, "alerts[0].generatorURL: must be a string"),
    (("alerts", 0, "fingerprint"), "f" * 129, "alerts[0].fingerprint: must be a non-empty string of at most 128"),
    (("truncatedAlerts",), True, "truncatedAlerts: must be an integer"),
    (("truncatedAlerts",), -1, "truncatedAlerts: must be >= 0"),
    (("alerts", 0, "startsAt"), "2026-12-07", "alerts[0].startsAt: must be an RFC 3339 timestamp"),
    (("alerts", 0, "startsAt"), "2026-12-07T10:00:00", "alerts[0].startsAt: must be an RFC 3339 timestamp"),
    (("alerts", 0, "startsAt"), "2026-12-07 10:00:00Z", "alerts[0].startsAt: must be an RFC 3339 timestamp"),
    (("alerts", 0, "startsAt"), "20261207T100000Z", "alerts[0].startsAt: must be an RFC 3339 timestamp"),
    (("alerts", 0, "startsAt"), "2026-12-07T10:00Z", "alerts[0].startsAt: must be an RFC 3339 timestamp"),
    (("alerts", 0, "startsAt"), "2026-02-30T10:00:00Z", "alerts[0].startsAt: must be an RFC 3339 timestamp"),
    (("alerts", 0, "startsAt"), "2026-12-07T10:00:00+0200", "alerts[0].startsAt: must be an RFC 3339 timestamp"),
    (("alerts", 0, "endsAt"), "2026-12-07T10:00:00", "alerts[0].endsAt: must be an RFC 3339 timestamp"),
])
def test_payload_rejects(path, value, message):
    with pytest.raises(PayloadError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse(_mutate(path, value))


@pytest.mark.parametrize("starts,ends", [
    ("2026-12-07T10:00:00Z", "0001-01-01T00:00:00Z"),  # Alertmanager's zero time: not resolved yet
    ("2026-12-07T10:00:00.123456789+02:00", "2026-12-07T11:00:00.5-05:30"),  # Go's RFC3339Nano
    ("2026-12-07t10:00:00z", ""),  # RFC 3339 allows lower case T and Z; endsAt may be absent
])
def test_payload_accepts_rfc3339_timestamps(starts, ends):
    body = _mutate(("alerts", 0, "startsAt"), starts)
    body["alerts"][0]["endsAt"] = ends
    alert = parse(body).alerts[0]
    assert (alert.starts_at, alert.ends_at) == (starts, ends)


def test_payload_rejects_a_body_that_is_not_an_object():
    with pytest.raises(PayloadError, match="body: must be a JSON object, got list"):
        parse([])


def test_payload_error_shows_at_most_a_short_value():
    with pytest.raises(PayloadError) as info:
        parse(_mutate(("version",), "x" * 10_000))
    assert str(info.value).startswith('version: must be "4"') and len(str(info.value)) < 200


def test_payload_accepts_and_ignores_unknown():
    n = parse(alert_body())
    assert n.version == "4" and n.alerts[0].labels["node"] == "gpu-1" and n.alerts[0].fingerprint == "fp1"
    body = alert_body()
    body["alerts"][0]["extra"] = {"nested": [1]}
    for optional in ("annotations", "endsAt", "generatorURL"):
        del body["alerts"][0][optional]
    del body["truncatedAlerts"]
    n = parse(body)
    assert (n.truncated_alerts, n.alerts[0].annotations, n.alerts[0].ends_at, n.alerts[0].generator_url) == (0, {}, "", "")
    with pytest.raises(dataclasses.FrozenInstanceError):
        n.alerts[0].status = "resolved"  # type: ignore[misc]


def _plan(alert):
    return alert.labels["node"], ["cordon", "taint", "replace"]


def test_journal_dedupe_and_restart(tmp_path):
    db = tmp_path / "j.db"
    j = Journal(db)
    alerts = parse(alert_body()).alerts
    r1 = j.receive(alerts, _plan, 1.0)
    assert (r1.new, r1.actions) == (1, 3)
    before = j.actions()
    r2 = j.receive(alerts, _plan, 2.0)
    assert (r2.new, r2.duplicates, r2.actions) == (0, 1, 0)
    assert j.actions() == before
    assert j.snapshot() == (1, 3)
    assert j.finish(before[-1].id, "done", {"ok": True}, 3.0)  # the cordon (lowest id is last in DESC order)
    assert not j.finish(before[-1].id, "done", {"ok": True}, 3.0)  # exactly once
    j.close()
    j2 = Journal(db)  # a restart finds the rest
    assert [a.kind for a in j2.pending()] == ["taint", "replace"]
    assert j2.snapshot() == (1, 3)
    with j2._conn:
        assert j2._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_journal_resolved_undoes_only_started_steps(tmp_path):
    j = Journal(tmp_path / "j.db")
    j.receive(parse(alert_body()).alerts, _plan, 1.0)
    cordon = j.pending()[0]
    j.finish(cordon.id, "done", {"cordoned_by_us": True}, 2.0)
    r = j.receive(parse(alert_body(status="resolved")).alerts, _plan, 3.0)
    assert r.new == 1
    kinds = {(a.kind, a.state) for a in j.actions()}
    assert ("taint", "skipped") in kinds and ("replace", "skipped") in kinds
    assert [a.kind for a in j.pending()] == ["untaint", "uncordon"]
    assert j.receive(parse(alert_body(status="resolved")).alerts, _plan, 4.0).duplicates == 1
    assert j.receive(parse(alert_body()).alerts, _plan, 5.0).duplicates == 1  # a late firing re-send changes nothing


POLICY = BreakerPolicy(max_nodes=2, max_percent=50, window_seconds=100)


@pytest.mark.parametrize("node,actioned,total,is_open,allowed,opens", [
    ("a", [], 10, False, True, False),
    ("a", [("b", 50)], 10, False, True, False),
    ("a", [("b", 50), ("c", 60)], 10, False, False, True),  # a third node > max_nodes 2
    ("b", [("b", 50), ("c", 60)], 10, False, True, False),  # continuing a node's ladder adds nothing
    ("a", [("b", -10), ("c", -20)], 10, False, True, False),  # outside the window
    ("a", [("b", 90)], 3, False, False, True),  # 2 of 3 = 67 % > 50 %
    ("a", [], 10, True, False, False),  # open stays open
])
def test_breaker(node, actioned, total, is_open, allowed, opens):
    v = breaker_verdict(POLICY, node, 100, actioned, total, is_open)
    assert (v.allowed, v.opens_breaker) == (allowed, opens)


FLOOR = BreakerPolicy(max_nodes=3, max_percent=10, window_seconds=100, min_nodes=2)


@pytest.mark.parametrize("node,actioned,total,allowed,opens", [
    ("a", [], 4, True, False),  # 1 of 4 = 25 % > 10 %, but below the floor of 2 nodes
    ("a", [], 1, True, False),  # a 1-node cluster: 100 %, still below the floor
    ("a", [("b", 90)], 4, False, True),  # 2 of 4 = 50 %: the floor is reached and the share exceeded
    ("a", [("b", 90)], 40, True, False),  # 2 of 40 = 5 %: the floor is reached, the share is not exceeded
    ("a", [("b", 90), ("c", 95), ("d", 99)], 1000, False, True),  # 4 > max_nodes 3, whatever the size
])
def test_breaker_percentage_applies_from_min_nodes(node, actioned, total, allowed, opens):
    v = breaker_verdict(FLOOR, node, 100, actioned, total, False)
    assert (v.allowed, v.opens_breaker) == (allowed, opens)


def test_default_breaker_lets_a_4_node_cluster_action_one_node():
    """The shipped defaults (max_percent 10) opened the breaker on the first node of any cluster
    under ten nodes; with breaker.min_nodes the first node is actioned, the second opens it."""
    from runtimekit.kube.remediation.config import load

    config = load(None, {"auth.token_file": "t"})
    policy = BreakerPolicy(config.breaker.max_nodes, config.breaker.max_percent, config.breaker.window_seconds,
                           config.breaker.min_nodes)
    first = breaker_verdict(policy, "gpu-1", 100, [], 4, False)
    assert first.allowed and not first.opens_breaker
    second = breaker_verdict(policy, "gpu-2", 100, [("gpu-1", 90)], 4, False)
    assert not second.allowed and second.opens_breaker and "2 of 4" in second.reason


@pytest.mark.parametrize("last,now,cooldown,allowed", [
    (None, 100, 60, True), (50, 100, 60, False), (40, 100, 60, True), (99, 100, 0, True),
])
def test_cooldown(last, now, cooldown, allowed):
    assert cooldown_verdict(last, now, cooldown).allowed is allowed


def test_reset_breaker(tmp_path):
    j = Journal(tmp_path / "j.db")
    j.open_breaker("too many", 1.0)
    assert j.breaker_state()[0]
    assert reset_breaker(tmp_path / "j.db", 2.0) is True
    assert j.breaker_state() == (False, "reset by operator")
    assert reset_breaker(tmp_path / "j.db", 3.0) is False


def test_reset_breaker_refuses_a_missing_journal_and_creates_nothing(tmp_path):
    with pytest.raises(JournalError, match="no such journal file"):
        reset_breaker(tmp_path / "typo.db", 1.0)
    assert list(tmp_path.iterdir()) == []


def test_journal_refuses_a_missing_folder(tmp_path):
    with pytest.raises(JournalError, match="does not exist"):
        Journal(tmp_path / "absent" / "j.db")
    assert list(tmp_path.iterdir()) == []


def test_the_shipped_kubernetes_configuration_loads(tmp_path):
    import yaml

    from runtimekit.kube.remediation.config import load
    from tests.agent_process import ROOT

    documents = list(yaml.safe_load_all((ROOT / "deploy" / "kubernetes" / "remediation" / "remediation.yaml").read_text()))
    embedded = next(d for d in documents if d["kind"] == "ConfigMap")["data"]["remediation.yaml"]
    path = tmp_path / "remediation.yaml"
    path.write_text(embedded)
    config = load(path)
    assert config.dry_run is True
    assert config.ladders["reboot_node"] == ["cordon", "taint", "replace"]  # what GPU-lost alerts ask for


@pytest.mark.parametrize("node,actioned,needed", [
    ("a", [], False),  # 1 node: below min_nodes 2, the percentage does not apply
    ("a", [("b", 90)], True),  # 2 nodes: the percentage decides
    ("b", [("b", 90)], False),  # a node already actioned continues its ladder
    ("a", [("b", 90), ("c", 95)], True),  # 3 nodes = max_nodes: still the percentage
    ("a", [("b", 90), ("c", 95), ("d", 99)], False),  # 4 > max_nodes 3: refused whatever the size
    ("a", [("b", -10)], False),  # outside the window
])
def test_the_cluster_size_is_asked_only_when_the_percentage_rule_decides(node, actioned, needed):
    from runtimekit.kube.remediation.breaker import needs_cluster_size

    assert needs_cluster_size(FLOOR, node, 100, actioned) is needed
