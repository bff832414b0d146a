"""How the API server judges resource.k8s.io/v1 objects, for the fake API (kube_fake_resource.py)
and the manifest tests: the OpenAPI schema of the server's release through PyPI's
kubernetes-validate (strict: an unknown field is an error), plus the rules of the API server's
Go validation (kubernetes/kubernetes ``pkg/apis/resource/validation/validation.go``) that a schema
cannot say and that a GPU driver's slices can break:

- names: a slice's name a DNS subdomain; ``spec.driver`` a DNS subdomain of at most 63
  characters; ``spec.pool.name`` DNS subdomains joined by ``/``, at most 253; device names DNS
  labels, unique in the slice; counter-set and counter names DNS labels;
- exactly one of ``nodeName``, ``nodeSelector``, ``allNodes``, ``perDeviceNodeSelection``;
  ``pool.generation`` >= 0, ``pool.resourceSliceCount`` > 0;
- at most 128 devices in a slice, 64 when a device consumes counters or has taints (1.35+,
  ``ResourceSliceMaxDevicesWithAdvancedFeatures``);
- attributes and capacities keyed by a C identifier (at most 32 characters), optionally behind a
  ``<DNS subdomain>/``; at most 32 of them per device; an attribute value with exactly one of
  ``int``, ``bool``, ``string``, ``version``; strings and versions at most 64 characters; a
  version semver 2.0.0;
- a ``requestPolicy`` only on a device with ``allowMultipleAllocations``; a ``validRange`` needs
  ``default`` and ``min``; min <= value; min <= default <= max <= value; with a step, min + step
  <= value and default and max on the grid min + n * step (``validateRequestPolicyRange``);
- 1.35 and later (the partitionable-devices layout of KEP-4815): devices or sharedCounters, not
  both, in one slice; at most 8 counter sets of at most 32 counters; at most 2 consumesCounters
  entries per device, each of at most 32 counters;
- 1.34: counter-set names unique in the slice, at most 32 counters across them; a device consumes
  only counters of a counter set of its own slice (at most 32 per device, 1024 per slice).

``pool_problems`` checks what no API server checks but the scheduler relies on (a pool's slices
agree on generation and count; device and counter-set names unique in the pool; every consumed
counter exists).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

import kubernetes_validate
from kubernetes.utils import parse_quantity

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
                    r"(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?")
ATTRIBUTE_TYPES = ("int", "bool", "string", "version")
NODE_SELECTION = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")


def minor_of(version: str) -> int:
    """The minor release of a gitVersion ("v1.35.0" -> 35)."""
    match = re.match(r"v?1\.(\d+)", version)
    if not match:
        raise ValueError(f"not a Kubernetes 1.x version: {version!r}")
    return int(match[1])


def schema_errors(obj: dict[str, Any], version: str) -> list[str]:
    """What the strict OpenAPI schema of release ``version`` ("v1.35.0") says about ``obj``."""
    try:
        kubernetes_validate.validate(obj, version.lstrip("v"), strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{error.json_path.removeprefix('$.') or '<root>'}: {error.message}"]
    return []


def is_dns_label(name: object) -> bool:
    return isinstance(name, str) and len(name) <= 63 and bool(DNS_LABEL.fullmatch(name))


def is_dns_subdomain(name: object, limit: int = 253) -> bool:
    return isinstance(name, str) and len(name) <= limit and bool(DNS_SUBDOMAIN.fullmatch(name))


def _qualified_name_errors(name: str, where: str) -> list[str]:
    domain, slash, identifier = name.rpartition("/")
    errors = []
    if slash and not is_dns_subdomain(domain, 63):
        errors.append(f"{where}: Invalid value: {name!r}: the domain must be a DNS subdomain of at most 63 characters")
    if len(identifier) > 32 or not C_IDENTIFIER.fullmatch(identifier):
        errors.append(f"{where}: Invalid value: {name!r}: must be a C identifier of at most 32 characters")
    return errors


def _quantity(value: object, where: str, errors: list[str]) -> Decimal | None:
    try:
        return Decimal(parse_quantity(value)) if isinstance(value, str | int) else None
    except (ValueError, InvalidOperation):
        errors.append(f"{where}: Invalid value: {value!r}: not a quantity")
        return None


def _attribute_errors(key: str, value: dict[str, Any], where: str) -> list[str]:
    set_fields = [name for name in ATTRIBUTE_TYPES if value.get(name) is not None]
    if len(set_fields) != 1:
        return [f"{where}: Invalid value: {value!r}: exactly one value must be specified"]
    (kind,) = set_fields
    text = value[kind]
    errors = []
    if kind in ("string", "version") and len(text) > 64:
        errors.append(f"{where}.{kind}: Too long: may not be more than 64 bytes")
    if kind == "version" and not SEMVER.fullmatch(text):
        errors.append(f"{where}.version: Invalid value: {text!r}: must be a string compatible with semver.org spec 2.0.0")
    return errors


def _policy_errors(value: Decimal, policy: dict[str, Any], where: str) -> list[str]:
    errors: list[str] = []
    valid_range = policy.get("validRange")
    if valid_range is None:
        return errors
    default = _quantity(policy.get("default"), f"{where}.default", errors)
    low = _quantity(valid_range.get("min"), f"{where}.validRange.min", errors)
    if default is None or low is None:
        return errors + [f"{where}: Required value: default and validRange.min are required with validRange"]
    high = _quantity(valid_range.get("max"), f"{where}.validRange.max", errors)
    step = _quantity(valid_range.get("step"), f"{where}.validRange.step", errors)
    if low > value:
        errors.append(f"{where}.validRange.min: Invalid value: min is larger than capacity value")
    if default < low:
        errors.append(f"{where}.validRange.min: Invalid value: default is less than min")
    if high is not None and not low <= default <= high <= value:
        errors.append(f"{where}.validRange.max: Invalid value: needs min <= default <= max <= capacity value")
    if step is not None:
        if low + step > value:
            errors.append(f"{where}.validRange.step: Invalid value: one step is larger than capacity value")
        for name, amount in (("default", default), ("max", high)):
            if amount is not None and step and (amount - low) % step:
                errors.append(f"{where}.validRange.step: Invalid value: {name} is not a multiple of the step from min")
    return errors


def _device_errors(device: dict[str, Any], where: str, minor: int) -> list[str]:
    errors = []
    if not is_dns_label(device.get("name")):
        errors.append(f"{where}.name: Invalid value: {device.get('name')!r}: must be a DNS label")
    attributes, capacity = device.get("attributes") or {}, device.get("capacity") or {}
    if len(attributes) + len(capacity) > 32:
        errors.append(f"{where}: Too many: {len(attributes) + len(capacity)}: attributes and capacities must have at most 32 items")
    for key, value in attributes.items():
        errors += _qualified_name_errors(key, f"{where}.attributes[{key}]")
        errors += _attribute_errors(key, value, f"{where}.attributes[{key}]")
    for key, entry in capacity.items():
        errors += _qualified_name_errors(key, f"{where}.capacity[{key}]")
        value = _quantity(entry.get("value"), f"{where}.capacity[{key}].value", errors)
        policy = entry.get("requestPolicy")
        if policy is not None and not device.get("allowMultipleAllocations"):
            errors.append(f"{where}.capacity[{key}].requestPolicy: Forbidden: allowMultipleAllocations must be true")
        elif policy is not None and value is not None:
            errors += _policy_errors(value, policy, f"{where}.capacity[{key}].requestPolicy")
    consumption = device.get("consumesCounters") or []
    if minor >= 35 and len(consumption) > 2:
        errors.append(f"{where}.consumesCounters: Too many: {len(consumption)}: must have at most 2 items")
    for n, entry in enumerate(consumption):
        counters = entry.get("counters") or {}
        if len(counters) > 32:
            errors.append(f"{where}.consumesCounters[{n}].counters: Too many: {len(counters)}: must have at most 32 items")
        errors += [f"{where}.consumesCounters[{n}].counters[{name}]: Invalid value: must be a DNS label"
                   for name in counters if not is_dns_label(name)]
    return errors


def _counter_set_errors(sets: list[dict[str, Any]], minor: int) -> list[str]:
    errors = []
    if minor >= 35 and len(sets) > 8:
        errors.append(f"spec.sharedCounters: Too many: {len(sets)}: must have at most 8 items")
    names = [counter_set.get("name") for counter_set in sets]
    for n, counter_set in enumerate(sets):
        where = f"spec.sharedCounters[{n}]"
        if not is_dns_label(counter_set.get("name")):
            errors.append(f"{where}.name: Invalid value: {counter_set.get('name')!r}: must be a DNS label")
        if names.count(counter_set.get("name")) > 1:
            errors.append(f"{where}.name: Duplicate value: {counter_set.get('name')!r}")
        counters = counter_set.get("counters") or {}
        if minor >= 35 and len(counters) > 32:
            errors.append(f"{where}.counters: Too many: {len(counters)}: must have at most 32 items")
        errors += [f"{where}.counters[{name}]: Invalid value: must be a DNS label" for name in counters if not is_dns_label(name)]
    if minor < 35 and sum(len(counter_set.get("counters") or {}) for counter_set in sets) > 32:
        errors.append("spec.sharedCounters: Too many: the counter sets hold more than 32 counters")
    return errors


def _combined_layout_errors(spec: dict[str, Any]) -> list[str]:
    """1.34: what a device consumes must be a counter of a counter set of the same slice."""
    known = {counter_set.get("name"): set(counter_set.get("counters") or {}) for counter_set in spec.get("sharedCounters") or []}
    errors, total = [], 0
    for d, device in enumerate(spec.get("devices") or []):
        consumed = 0
        for n, entry in enumerate(device.get("consumesCounters") or []):
            where = f"spec.devices[{d}].consumesCounters[{n}]"
            if entry.get("counterSet") not in known:
                errors.append(f"{where}.counterSet: Invalid value: {entry.get('counterSet')!r}: must reference a counterSet "
                              "defined in the ResourceSlice sharedCounters")
                continue
            errors += [f"{where}.counters[{name}]: Invalid value: must reference a counter defined in counter set "
                       f"{entry['counterSet']!r}" for name in entry.get("counters") or {} if name not in known[entry["counterSet"]]]
            consumed += len(entry.get("counters") or {})
        if consumed > 32:
            errors.append(f"spec.devices[{d}].consumesCounters: Too many: {consumed} counters, at most 32")
        total += consumed
    if total > 1024:
        errors.append(f"spec.devices: Too many: {total} consumed counters in the slice, at most 1024")
    return errors


def slice_errors(obj: dict[str, Any], minor: int) -> list[str]:
    """The Go validation's rules above for a ResourceSlice on release 1.``minor``."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    errors = []
    if not is_dns_subdomain(meta.get("name")):
        errors.append(f"metadata.name: Invalid value: {meta.get('name')!r}: must be a DNS subdomain")
    if not is_dns_subdomain(spec.get("driver"), 63):
        errors.append(f"spec.driver: Invalid value: {spec.get('driver')!r}: must be a DNS subdomain of at most 63 characters")
    pool = spec.get("pool") or {}
    pool_name = pool.get("name")
    if not (isinstance(pool_name, str) and len(pool_name) <= 253 and all(is_dns_subdomain(part) for part in pool_name.split("/"))):
        errors.append(f"spec.pool.name: Invalid value: {pool_name!r}: must be DNS subdomains separated by '/'")
    if not isinstance(pool.get("generation"), int) or pool["generation"] < 0:
        errors.append("spec.pool.generation: Invalid value: must be an integer >= 0")
    if not isinstance(pool.get("resourceSliceCount"), int) or pool["resourceSliceCount"] <= 0:
        errors.append("spec.pool.resourceSliceCount: Invalid value: must be greater than zero")
    selection = [name for name in NODE_SELECTION if spec.get(name) not in (None, False, "")]
    if len(selection) != 1:
        errors.append(f"spec: Invalid value: exactly one of {', '.join(NODE_SELECTION)} is required, got {selection}")
    if "nodeName" in selection and not is_dns_subdomain(spec["nodeName"]):
        errors.append(f"spec.nodeName: Invalid value: {spec['nodeName']!r}: must be a DNS subdomain")
    devices, sets = spec.get("devices") or [], spec.get("sharedCounters") or []
    if minor >= 35 and devices and sets:
        errors.append("spec: Invalid value: only one of devices and sharedCounters may be set")
    advanced = minor >= 35 and any(device.get("consumesCounters") or device.get("taints") for device in devices)
    limit = 64 if advanced else 128
    if len(devices) > limit:
        return errors + [f"spec.devices: Too many: {len(devices)}: must have at most {limit} items"]
    names = [device.get("name") for device in devices]
    for d, device in enumerate(devices):
        errors += _device_errors(device, f"spec.devices[{d}]", minor)
        if names.count(device.get("name")) > 1:
            errors.append(f"spec.devices[{d}].name: Duplicate value: {device.get('name')!r}")
    errors += _counter_set_errors(sets, minor)
    if minor < 35:
        errors += _combined_layout_errors(spec)
    return errors


def pool_problems(slices: Iterable[dict[str, Any]]) -> list[str]:
    """What the scheduler would find wrong with one pool published as ``slices`` (all of one
    driver and pool): slices that disagree on generation or count, or whose count is not the
    number of slices; device or counter-set names used twice; a consumed counter no counter set
    of the pool defines."""
    specs = [item["spec"] for item in slices]
    problems = []
    generations = {spec["pool"]["generation"] for spec in specs}
    counts = {spec["pool"]["resourceSliceCount"] for spec in specs}
    if len(generations) > 1 or counts != {len(specs)}:
        problems.append(f"generations {sorted(generations)}, counts {sorted(counts)} for {len(specs)} slices")
    devices = [device for spec in specs for device in spec.get("devices") or []]
    sets = [counter_set for spec in specs for counter_set in spec.get("sharedCounters") or []]
    for kind, names in (("device", [d["name"] for d in devices]), ("counter set", [s["name"] for s in sets])):
        problems += [f"{kind} {name!r} published {names.count(name)} times" for name in sorted(set(names)) if names.count(name) > 1]
    counters = {counter_set["name"]: set(counter_set.get("counters") or {}) for counter_set in sets}
    for device in devices:
        for entry in device.get("consumesCounters") or []:
            missing = set(entry.get("counters") or {}) - counters.get(entry["counterSet"], set())
            if missing:
                problems.append(f"device {device['name']!r} consumes {sorted(missing)} of {entry['counterSet']!r}, which the pool lacks")
    return problems
