"""Alertmanager webhook payload (version "4") parsed into frozen dataclasses.

Pure: takes the decoded JSON, returns ``Notification`` or raises ``PayloadError`` naming the
field and the rule (the server answers HTTP 400 with it). The payload is described once, as a
``runtimekit.schema`` shape (``NOTIFICATION``): which fields are required, their types, and as
``Key`` leaves the value rules (allowed statuses, the version, RFC 3339 timestamps, the
fingerprint's length) and the optional fields' defaults. ``check_shape`` validates it; nothing
here checks a field by hand. Unknown fields are ignored (``"..."``), as Alertmanager asks of
receivers (gpu-faults.md §4; alertmanager notify/webhook/webhook.go).

This is also the one place where an alert's node label is checked (``names.name_problem``): an
alert naming a node that is not a valid Kubernetes node name is moved to ``refused`` with the
reason, so nothing downstream — journal, ladder, Kubernetes API — ever sees its name. An alert
without the label is kept (it asks for nothing).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runtimekit.schema import OTHER_KEYS, Key, at_least, check_shape

from .names import name_problem

STATUSES = ("firing", "resolved")


class PayloadError(ValueError):
    """Invalid webhook payload; the message names the field and the rule."""


@dataclass(frozen=True, slots=True)
class Alert:
    status: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: str  # as sent (RFC 3339); part of the dedupe key, so kept verbatim
    ends_at: str
    fingerprint: str
    generator_url: str


@dataclass(frozen=True, slots=True)
class Refused:
    """An alert left out: ``error`` names the field (``alerts[i].labels.node``) and the rule."""

    fingerprint: str
    error: str


@dataclass(frozen=True, slots=True)
class Notification:
    version: str
    status: str
    receiver: str
    group_key: str
    alerts: tuple[Alert, ...]  # the alerts accepted
    truncated_alerts: int = 0
    refused: tuple[Refused, ...] = ()


# -- the rules a shape's types cannot say ---------------------------------------------------------

# RFC 3339 section 5.6's date-time; "T" and "Z" may be lower case (its note to section 5.6)
_RFC3339 = re.compile(r"(?P<datetime>\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2})(?P<fraction>\.\d+)?"
                      r"(?P<zone>[Zz]|[+-]\d{2}:\d{2})", re.ASCII)


def _version_4(value: str) -> str | None:
    return None if value == "4" else 'must be "4"'


def _rfc3339(value: str) -> str | None:
    """An RFC 3339 timestamp, or "" (Alertmanager sends endsAt "0001-01-01T00:00:00Z" or nothing):
    date, ``T``, time and a zone, as Alertmanager (Go's RFC3339Nano) writes them; a date alone,
    no zone, or ISO 8601's other forms are refused."""
    if not value:
        return None
    match = _RFC3339.fullmatch(value)
    if match is None or not _exists(match):
        return "must be an RFC 3339 timestamp (YYYY-MM-DDTHH:MM:SS[.fraction], then Z or +HH:MM)"
    return None


def _exists(match: re.Match[str]) -> bool:
    """Is the matched timestamp a real one (no 30 February, no hour 25)? Fractions past
    microseconds are dropped: Python's datetime keeps no more."""
    zone = "+00:00" if match["zone"] in ("Z", "z") else match["zone"]
    try:
        datetime.fromisoformat(f"{match['datetime']}{(match['fraction'] or '')[:7]}{zone}")
    except ValueError:
        return False
    return True


def _rfc3339_given(value: str) -> str | None:
    return "must be a non-empty RFC 3339 timestamp" if not value else _rfc3339(value)


def _fingerprint(value: str) -> str | None:
    return None if 0 < len(value) <= 128 else "must be a non-empty string of at most 128 characters"


_STRING_MAP = {OTHER_KEYS: str}  # label name -> value

# -- the payload, declared once -------------------------------------------------------------------

ALERT: dict[str, Any] = {
    "status": Key(str, None, "firing or resolved", allowed=STATUSES),
    "labels": _STRING_MAP,
    "annotations?": _STRING_MAP,
    "startsAt": Key(str, None, "when the alert started (RFC 3339); part of the dedupe key", _rfc3339_given),
    "endsAt?": Key(str, "", "when it ended or will be resolved (RFC 3339)", _rfc3339),
    "generatorURL?": Key(str, "", "the alert's source (Prometheus graph)"),
    "fingerprint": Key(str, None, "the alert's identity (hash of its labels)", _fingerprint),
    OTHER_KEYS: Any,
}

NOTIFICATION: dict[str, Any] = {
    "version": Key(str, None, 'the webhook format; only "4" exists', _version_4),
    "status": Key(str, None, "firing when any alert fires", allowed=STATUSES),
    "receiver": Key(str, None, "the receiver's name in Alertmanager's configuration"),
    "groupKey": Key(str, None, "identifies the alert group"),
    "truncatedAlerts?": Key(int, 0, "alerts left out of this notification (max_alerts)", at_least(0)),
    "alerts": [ALERT],
    OTHER_KEYS: Any,  # groupLabels, commonLabels, commonAnnotations, externalURL: not used
}


def _get(data: Mapping[str, Any], shape: Mapping[str, Any], name: str) -> Any:
    """The field, or the default its (optional) shape declares: a Key's default, {} for a map."""
    if name in data:
        return data[name]
    declared = shape[f"{name}?"]
    return declared.default if isinstance(declared, Key) else {}


def _alert(data: Mapping[str, Any]) -> Alert:
    return Alert(
        status=data["status"],
        labels=dict(data["labels"]),
        annotations=dict(_get(data, ALERT, "annotations")),
        starts_at=data["startsAt"],
        ends_at=_get(data, ALERT, "endsAt"),
        fingerprint=data["fingerprint"],
        generator_url=_get(data, ALERT, "generatorURL"),
    )


def parse(data: Any, node_label: str = "node") -> Notification:
    """Validate a decoded webhook body; raises PayloadError naming the field and rule. Alerts whose
    ``node_label`` holds an invalid node name are returned in ``refused``, not in ``alerts``."""
    if not isinstance(data, dict):
        raise PayloadError(f"body: must be a JSON object, got {type(data).__name__}")
    check_shape(data, NOTIFICATION, "", PayloadError)
    alerts: list[Alert] = []
    refused: list[Refused] = []
    for index, item in enumerate(data["alerts"]):
        node = item["labels"].get(node_label, "")
        problem = name_problem(node) if node else None
        if problem:
            refused.append(Refused(item["fingerprint"], f"alerts[{index}].labels.{node_label}: {problem}"))
        else:
            alerts.append(_alert(item))
    return Notification(
        version=data["version"],
        status=data["status"],
        receiver=data["receiver"],
        group_key=data["groupKey"],
        alerts=tuple(alerts),
        truncated_alerts=_get(data, NOTIFICATION, "truncatedAlerts"),
        refused=tuple(refused),
    )
