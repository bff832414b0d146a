"""The opaque SliceConfig (kube/dra/sliceconfig.py), decoded strictly: every mistake names the
field under ``parameters`` and the rule; and the Kubernetes quantities of consumedCapacity."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from runtimekit.kube.dra.sliceconfig import SliceConfig, SliceConfigError, bytes_to_mib_floor, parse_quantity, parse_slice_config

HEAD = {"apiVersion": "runtimekit.io/v1", "kind": "SliceConfig"}


@pytest.mark.parametrize(("parameters", "expected"), [
    (HEAD, SliceConfig()),
    ({**HEAD, "compute": 50}, SliceConfig(compute=50)),
    ({**HEAD, "memory": "2GiB"}, SliceConfig(memory_mib=2048)),
    ({**HEAD, "memory": "2Gi"}, SliceConfig(memory_mib=2048)),  # as capacity.requests spell it
    ({**HEAD, "compute": 100, "memory": "640MiB"}, SliceConfig(compute=100, memory_mib=640)),
    ({**HEAD, "compute": 1, "memory": "128Mi"}, SliceConfig(compute=1, memory_mib=128)),
])
def test_a_valid_slice_config_is_read(parameters: dict[str, Any], expected: SliceConfig) -> None:
    assert parse_slice_config(parameters) == expected


@pytest.mark.parametrize(("parameters", "field", "rule"), [
    (None, "parameters", "expected a mapping"),
    ("compute: 50", "parameters", "expected a mapping"),
    ({"kind": "SliceConfig"}, "parameters.apiVersion", "required key is missing"),
    ({"apiVersion": "runtimekit.io/v1"}, "parameters.kind", "required key is missing"),
    ({**HEAD, "apiVersion": "runtimekit.io/v2"}, "parameters.apiVersion", "must be one of runtimekit.io/v1"),
    ({**HEAD, "kind": "GpuConfig"}, "parameters.kind", "must be one of SliceConfig"),
    ({**HEAD, "compute": 0}, "parameters.compute", "1"),
    ({**HEAD, "compute": 101}, "parameters.compute", "100"),
    ({**HEAD, "compute": "50"}, "parameters.compute", "must be an integer"),
    ({**HEAD, "compute": 50.5}, "parameters.compute", "must be an integer"),
    ({**HEAD, "compute": True}, "parameters.compute", "got a boolean"),
    ({**HEAD, "memory": 2048}, "parameters.memory", "must be a string"),
    ({**HEAD, "memory": "2G"}, "parameters.memory", "must be NGiB or NMiB"),
    ({**HEAD, "memory": "1.5GiB"}, "parameters.memory", "whole number"),
    ({**HEAD, "memory": "0MiB"}, "parameters.memory", "above 0"),
    ({**HEAD, "memory": "100MiB"}, "parameters.memory", "a multiple of 128 MiB"),
    ({**HEAD, "memory": " 2GiB"}, "parameters.memory", "must be NGiB or NMiB"),
    ({**HEAD, "sharing": "tdm"}, "parameters.sharing", "unknown key"),
    ({**HEAD, "Compute": 50}, "parameters.Compute", "unknown key"),
])
def test_every_bad_field_is_named_with_its_rule(parameters: Any, field: str, rule: str) -> None:
    with pytest.raises(SliceConfigError) as caught:
        parse_slice_config(parameters)
    message = str(caught.value)
    assert message.startswith(f"{field}:"), message
    assert rule in message, message


@pytest.mark.parametrize(("text", "value"), [
    ("2Gi", Fraction(2 << 30)), ("50", Fraction(50)), ("1.5k", Fraction(1500)), ("128974848", Fraction(128974848)),
    ("1e3", Fraction(1000)), ("500m", Fraction(1, 2)), (".5Mi", Fraction(1 << 19)), ("2147483648", Fraction(2 << 30)),
    (7, Fraction(7)),
])
def test_kubernetes_quantities_are_read_exactly(text: Any, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "2 Gi", "2GiB", "two", "1.2.3", None, True, 1.5, [2]])
def test_what_is_no_quantity_is_none(text: Any) -> None:
    assert parse_quantity(text) is None


@pytest.mark.parametrize(("value", "mib"), [
    (Fraction(2 << 30), 2048), (2 << 30, 2048), ((2 << 30) - 1, 1920), (Fraction(200 << 20), 128), (127 << 20, 0),
])
def test_bytes_round_down_to_the_agents_granule(value: Fraction | int, mib: int) -> None:
    assert bytes_to_mib_floor(value) == mib
