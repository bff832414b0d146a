"""Alertmanager webhook payload (version "4") parsed into frozen dataclasses.

Pure: takes the decoded JSON, returns ``Notification`` or raises ``PayloadError`` naming the
field and the rule. Unknown fields are ignored, as Alertmanager asks of receivers
(gpu-faults.md §4; alertmanager notify/webhook/webhook.go).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

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
class Notification:
    version: str
    status: str
    receiver: str
    group_key: str
    alerts: tuple[Alert, ...]
    truncated_alerts: int = 0


def _field(data: Mapping[str, Any], name: str, where: str, kind: type, required: bool = True, default: Any = None) -> Any:
    if name not in data:
        if required:
            raise PayloadError(f"{where}{name}: required field is missing")
        return default
    value = data[name]
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        raise PayloadError(f"{where}{name}: must be {kind.__name__}, got {type(value).__name__}")
    return value


def _string_map(data: Mapping[str, Any], name: str, where: str, required: bool) -> dict[str, str]:
    value = _field(data, name, where, dict, required, {})
    for key, item in value.items():
        if not isinstance(item, str):
            raise PayloadError(f"{where}{name}.{key}: must be a string, got {type(item).__name__}")
    return dict(value)


def _timestamp(data: Mapping[str, Any], name: str, where: str, required: bool) -> str:
    value = _field(data, name, where, str, required, "")
    if value:
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise PayloadError(f"{where}{name}: must be an RFC 3339 timestamp, got {value[:64]!r}") from None
    return value


def _alert(data: Any, index: int) -> Alert:
    where = f"alerts[{index}]."
    if not isinstance(data, dict):
        raise PayloadError(f"alerts[{index}]: must be an object, got {type(data).__name__}")
    status = _field(data, "status", where, str)
    if status not in STATUSES:
        raise PayloadError(f"{where}status: must be one of firing, resolved, got {status[:32]!r}")
    fingerprint = _field(data, "fingerprint", where, str)
    if not fingerprint or len(fingerprint) > 128:
        raise PayloadError(f"{where}fingerprint: must be a non-empty string of at most 128 characters")
    starts_at = _timestamp(data, "startsAt", where, True)
    if not starts_at:
        raise PayloadError(f"{where}startsAt: must be a non-empty RFC 3339 timestamp")
    return Alert(
        status=status,
        labels=_string_map(data, "labels", where, True),
        annotations=_string_map(data, "annotations", where, False),
        starts_at=starts_at,
        ends_at=_timestamp(data, "endsAt", where, False),
        fingerprint=fingerprint,
        generator_url=_field(data, "generatorURL", where, str, False, ""),
    )


def parse(data: Any) -> Notification:
    """Validate a decoded webhook body; raises PayloadError naming the field and rule."""
    if not isinstance(data, dict):
        raise PayloadError(f"body: must be a JSON object, got {type(data).__name__}")
    version = _field(data, "version", "", str)
    if version != "4":
        raise PayloadError(f"version: must be \"4\", got {version[:16]!r}")
    status = _field(data, "status", "", str)
    if status not in STATUSES:
        raise PayloadError(f"status: must be one of firing, resolved, got {status[:32]!r}")
    alerts = _field(data, "alerts", "", list)
    truncated = _field(data, "truncatedAlerts", "", int, False, 0)
    if truncated < 0:
        raise PayloadError("truncatedAlerts: must be >= 0")
    return Notification(
        version=version,
        status=status,
        receiver=_field(data, "receiver", "", str),
        group_key=_field(data, "groupKey", "", str),
        alerts=tuple(_alert(item, i) for i, item in enumerate(alerts)),
        truncated_alerts=truncated,
    )
