"""The driver's opaque configuration, ``SliceConfig``, and the Kubernetes quantities it meets.

A claim (or a DeviceClass) passes it in ``spec.devices.config[].opaque.parameters`` for this
driver; the API server copies class and claim entries into the allocation
(``status.allocation.devices.config``, resource.k8s.io/v1 ``DeviceAllocationConfiguration``)::

    apiVersion: runtimekit.io/v1   # versioned like a Kubernetes API
    kind: SliceConfig
    compute: 50                    # optional: percent of the GPU, 1..100
    memory: 2GiB                   # optional: NGiB or NMiB (or NGi, NMi), a multiple of 128 MiB, more than 0

Decoded strictly, as NVIDIA's driver decodes its GpuConfig (kubernetes-sigs/dra-driver-nvidia-gpu,
api/.../v1beta1 ``StrictDecoder``): an unknown field, a wrong type or a value out of range is an
error naming the field (``parameters.compute``) and the rule. ``memory`` is spelled as the agent's
CreateSlice takes it (proto/runtimekit/v1/service.proto ``CreateSliceRequest.memory``), or with
Kubernetes' binary suffixes ``Gi`` / ``Mi`` as the claim's ``capacity.requests`` spell it (2Gi = 2GiB).

``parse_quantity`` reads a ``resource.Quantity`` as the API server serialises one (k8s.io/apimachinery
pkg/api/resource/quantity.go: a decimal number, then a binary suffix Ki..Ei, a decimal suffix
n u m k M G T P E, or an exponent e/E N), as an exact ``Fraction``: consumedCapacity in results.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from runtimekit.schema import Key, between, check_shape

__all__ = [
    "API_VERSION", "KIND", "MEMORY_STEP_MIB", "SliceConfig", "SliceConfigError", "bytes_to_mib_floor", "parse_memory",
    "parse_quantity", "parse_slice_config",
]

API_VERSION = "runtimekit.io/v1"
KIND = "SliceConfig"
#: The agent's memory granule for slices (service.proto: "a multiple of 128 MiB").
MEMORY_STEP_MIB = 128
_MIB = 1 << 20
_MEMORY = re.compile(r"([1-9][0-9]{0,9})(Gi|Mi)B?")
_QUANTITY = re.compile(r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?")
_BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "k": Fraction(10**3),
            "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12), "P": Fraction(10**15), "E": Fraction(10**18)}


class SliceConfigError(ValueError):
    """A SliceConfig breaks a rule; the message names the field and the rule."""


@dataclass(frozen=True, slots=True)
class SliceConfig:
    """A validated SliceConfig: ``compute`` in percent of the GPU, ``memory_mib`` in MiB; None when not given."""

    compute: int | None = None
    memory_mib: int | None = None


def parse_memory(text: str) -> int | None:
    """"2GiB" or "2Gi" -> 2048, "512MiB" or "512Mi" -> 512 (MiB); None when ``text`` is not NGiB / NMiB
    (NGi / NMi) with whole N > 0."""
    match = _MEMORY.fullmatch(text)
    if match is None:
        return None
    return int(match[1]) * (1024 if match[2] == "Gi" else 1)


def _memory_problem(value: str) -> str | None:
    mib = parse_memory(value)
    if mib is None:
        return "must be NGiB or NMiB (NGi, NMi) with N a whole number above 0 (2GiB, 512MiB, 2Gi)"
    if mib % MEMORY_STEP_MIB:
        return f"must be a multiple of {MEMORY_STEP_MIB} MiB"
    return None


_SHAPE = {
    "apiVersion": Key(str, None, "the API version", allowed=(API_VERSION,)),
    "kind": Key(str, None, "the kind", allowed=(KIND,)),
    "compute?": Key(int, None, "compute in percent of the GPU", between(1, 100)),
    "memory?": Key(str, None, "memory, NGiB or NMiB (NGi, NMi)", _memory_problem),
}


def parse_slice_config(parameters: Any) -> SliceConfig:
    """A SliceConfig from an opaque entry's ``parameters``; SliceConfigError naming
    ``parameters.<field>`` and the rule (an unknown field, a type, a range, the memory's form)."""
    check_shape(parameters, _SHAPE, "parameters", SliceConfigError)
    memory = parameters.get("memory")
    return SliceConfig(compute=parameters.get("compute"), memory_mib=None if memory is None else parse_memory(memory))


def parse_quantity(text: Any) -> Fraction | None:
    """A Kubernetes quantity ("2Gi", "50", "1.5k", "128974848", "1e3") as an exact number; None when
    ``text`` is no quantity (an int is taken as is: JSON may carry one)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return Fraction(text)
    if not isinstance(text, str):
        return None
    match = _QUANTITY.fullmatch(text)
    if match is None:
        return None
    number, suffix = Fraction(match["number"]), match["suffix"] or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    if suffix:
        return number * Fraction(10) ** int(suffix[1:])
    return number


def bytes_to_mib_floor(value: Fraction | int) -> int:
    """Whole MiB in ``value`` bytes, rounded down to the slice granule (``MEMORY_STEP_MIB``)."""
    mib = int(value // _MIB)
    return mib - mib % MEMORY_STEP_MIB
