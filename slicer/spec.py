"""Slice requests checked into slice specs: every field against its rule, the first broken rule
reported as ``SliceError("invalid_argument", field, "<rule>, got <value>")`` with the field named
as in ``SliceRequest``. Pure: no I/O.

The rules (the gRPC API and ``runtimekit slice create`` document the same):

- ``mode``: ``tdm`` or ``mig``, lower case.
- ``compute``: an integer 0-100, percent of one card; 0 means unlimited (no compute share).
- ``memory``: ``NGiB`` or ``NMiB``, N a whole decimal number, the unit spelled exactly so (binary
  units: 1 GiB = 1024 MiB), no spaces, sign or decimal point; greater than 0; in MiB a multiple of
  128 (``MEMORY_STEP_MIB``); at most ``MAX_MEMORY_MIB`` (1 TiB, far above any card; the card's own
  memory is checked by ``check_fits_card`` once the card is known).
- ``device``: ``""`` or ``any`` (any card), an NVML index 0-``MAX_DEVICE_INDEX``, or a GPU UUID as
  NVML writes it (``GPU-`` and 8-4-4-4-12 hex digits).
- owner, exactly one form: ``pod_uid`` (a Kubernetes UID: 8-4-4-4-12 lower-case hex digits, as the
  API server makes them) with ``container`` (a container name: a DNS-1123 label, 1-63 lower-case
  letters, digits and ``-``, starting and ending with a letter or digit); or ``owner_id`` (1-128
  characters of letters, digits and ``. _ - : / @``, starting with a letter or digit: a user, a
  tool, a job name).
- ``priority``: an integer 0-100 (``MAX_PRIORITY``); higher is more important.
- ``profile``: ``""`` (the planner takes the smallest profile that holds the slice) or a MIG
  profile's name as the driver reports it (1-64 of letters, digits and ``. + -``: "1g.10gb",
  "1g.10gb+me", "1c.2g.20gb"); only with mode ``mig`` and a device given as an index or a UUID
  (a profile is a card's). With it ``memory`` may be ``""`` and ``compute`` 0: what the profile
  gives. Whether the card offers it, and whether compute and memory fit in it, is the planner's
  check (``runtimekit.slicer.mig_planner``), once the card is known.
- ``placement_start``: None (the planner chooses) or an integer 0-``MAX_PLACEMENT_START``, the
  memory slice the GPU instance starts at; only with ``profile``. Whether it is one of the
  profile's placements, and free, is the planner's check.

Shared with the planners: ``MAX_COMPUTE`` (100, percent: a whole card's compute) and ``POLICIES``,
the placement policies both planners take (``slicer.policy``).
"""

from __future__ import annotations

import re

from runtimekit.state.slices import (
    MEMORY_STEP_MIB,
    SLICE_MODES,
    DeviceSelector,
    Owner,
    SliceError,
    SliceMode,
    SliceRequest,
    SliceSpec,
)

__all__ = [
    "MAX_COMPUTE", "MAX_DEVICE_INDEX", "MAX_MEMORY_MIB", "MAX_PLACEMENT_START", "MAX_PRIORITY", "POLICIES", "check_fits_card",
    "format_memory", "parse_device", "parse_memory", "parse_mode", "parse_request", "to_request",
]

MAX_COMPUTE = 100  # percent of one card: the whole card
POLICIES = ("binpack", "spread")  # where a slice for any device goes: the fullest card that fits, the emptiest
MAX_MEMORY_MIB = 1 << 20  # 1 TiB: a bound against overflow, not a card's size
MAX_DEVICE_INDEX = 1023  # NVML indexes are small; the bound keeps "99999999999" a clear error
MAX_PRIORITY = 100
MAX_PLACEMENT_START = 0xFFFF_FFFF  # the API's uint32; real cards have 8 memory slices, the planner names their starts
_MIB_PER_GIB = 1024

_MEMORY = re.compile(r"([0-9]+)(GiB|MiB)")
_MEMORY_DIGITS = 10  # more digits are over MAX_MEMORY_MIB anyway (and int() of them is not free)
_INDEX = re.compile(r"[0-9]{1,4}")
_GPU_UUID = re.compile(r"GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_POD_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_CONTAINER = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_OWNER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}")
_PROFILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+-]{0,63}")

_MEMORY_RULE = f"NGiB or NMiB with N a whole number (MiB a multiple of {MEMORY_STEP_MIB}), no spaces"
_DEVICE_RULE = f"'' or 'any', a GPU index 0-{MAX_DEVICE_INDEX}, or a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)"
_PROFILE_RULE = "'' or a MIG profile's name as GetNode lists it (1-64 of letters, digits and . + -, e.g. 1g.10gb)"
_PLACEMENT_RULE = f"absent, or an integer 0-{MAX_PLACEMENT_START} (the memory slice the partition starts at)"


def _refuse(field: str, rule: str, value: object) -> SliceError:
    return SliceError("invalid_argument", field, f"{rule}, got {value!r}")


def _text(value: object, field: str, rule: str) -> str:
    if not isinstance(value, str):
        raise _refuse(field, rule, value)
    return value


def _integer(value: object, field: str, low: int, high: int, rule: str) -> int:
    """``value`` as an int in [low, high]; bools and other types are refused, not converted."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _refuse(field, rule, value)
    return value


def parse_mode(text: str, field: str = "mode") -> SliceMode:
    """``tdm`` or ``mig``."""
    for mode in SLICE_MODES:
        if text == mode:
            return mode
    raise _refuse(field, "one of " + ", ".join(SLICE_MODES), text)


def parse_memory(text: str, field: str = "memory") -> int:
    """``"2GiB"`` -> 2048, ``"512MiB"`` -> 512: MiB, a multiple of 128, greater than 0."""
    match = _MEMORY.fullmatch(_text(text, field, _MEMORY_RULE))
    if match is None:
        raise _refuse(field, _MEMORY_RULE, text)
    digits, unit = match[1].lstrip("0"), match[2]
    if not digits:
        raise _refuse(field, "greater than 0", text)
    mib = int(digits[:_MEMORY_DIGITS + 1]) * (_MIB_PER_GIB if unit == "GiB" else 1)
    if mib > MAX_MEMORY_MIB:
        raise _refuse(field, f"at most {MAX_MEMORY_MIB // _MIB_PER_GIB}GiB", text)
    if mib % MEMORY_STEP_MIB:
        raise _refuse(field, f"a multiple of {MEMORY_STEP_MIB} MiB", text)
    return mib


def format_memory(mib: int) -> str:
    """MiB written as ``parse_memory`` reads it: ``NGiB`` when whole GiB, else ``NMiB``."""
    return f"{mib // _MIB_PER_GIB}GiB" if mib % _MIB_PER_GIB == 0 else f"{mib}MiB"


def parse_device(text: str) -> DeviceSelector:
    """``""`` or ``"any"`` -> any card; ``"3"`` -> index 3; ``"GPU-…"`` -> that UUID (as written)."""
    text = _text(text, "device", _DEVICE_RULE)
    if text in ("", "any"):
        return DeviceSelector()
    if _INDEX.fullmatch(text) and int(text) <= MAX_DEVICE_INDEX:
        return DeviceSelector(index=int(text))
    if _GPU_UUID.fullmatch(text):
        return DeviceSelector(uuid=text)
    raise _refuse("device", _DEVICE_RULE, text)


_CARD_RULE = f"a GPU index 0-{MAX_DEVICE_INDEX} or a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx): a mode is set per card"


def parse_card(text: str) -> DeviceSelector:
    """One card, as a mode change names it: an index or a UUID (never '' or 'any')."""
    text = _text(text, "device", _CARD_RULE)
    if text in ("", "any"):
        raise _refuse("device", _CARD_RULE, text)
    try:
        return parse_device(text)
    except SliceError:
        raise _refuse("device", _CARD_RULE, text) from None


def _owner(request: SliceRequest) -> Owner:
    pod_uid = _text(request.pod_uid, "pod_uid", "a Kubernetes UID")
    container = _text(request.container, "container", "a container name")
    owner_id = _text(request.owner_id, "owner_id", "an owner name")
    if pod_uid:
        if not _POD_UID.fullmatch(pod_uid):
            raise _refuse("pod_uid", "a Kubernetes UID (lower-case hex digits 8-4-4-4-12)", pod_uid)
        if not _CONTAINER.fullmatch(container):
            raise _refuse("container", "the pod's container name, required with pod_uid (a DNS-1123 label: "
                          "1-63 of a-z, 0-9 and '-', starting and ending with a letter or digit)", container)
        if owner_id:
            raise _refuse("owner_id", "empty when pod_uid is given (one owner form only)", owner_id)
        return Owner(pod_uid=pod_uid, container=container)
    if container:
        raise _refuse("container", "only with pod_uid", container)
    if not owner_id:
        raise _refuse("owner_id", "an owner is required: pod_uid with container, or owner_id", owner_id)
    if not _OWNER_ID.fullmatch(owner_id):
        raise _refuse("owner_id", "1-128 of letters, digits and . _ - : / @, starting with a letter or digit", owner_id)
    return Owner(owner_id=owner_id)


def _profile(request: SliceRequest, mode: SliceMode, device: DeviceSelector) -> str:
    """The profile's name, "" for none: only with mode mig and a named device."""
    profile = _text(request.profile, "profile", _PROFILE_RULE)
    if not profile:
        return ""
    if not _PROFILE.fullmatch(profile):
        raise _refuse("profile", _PROFILE_RULE, profile)
    if mode != "mig":
        raise _refuse("profile", f"only with mode 'mig' (a partition profile), not mode {mode!r}", profile)
    if device.any:
        raise _refuse("profile", "only with a device given as a GPU index or UUID (a profile is one card's), "
                      f"not device {str(request.device)!r}", profile)
    return profile


def _placement_start(request: SliceRequest, profile: str) -> int | None:
    """The placement's start, None for none: only with a profile."""
    if request.placement_start is None:
        return None
    start = _integer(request.placement_start, "placement_start", 0, MAX_PLACEMENT_START, _PLACEMENT_RULE)
    if not profile:
        raise _refuse("placement_start", "only with a profile (a placement is one profile's)", start)
    return start


def parse_request(request: SliceRequest) -> SliceSpec:
    """Check ``request`` into a ``SliceSpec``, field by field in this order: mode, compute, memory,
    device, profile, placement_start, the owner (pod_uid, container, owner_id), priority. The first
    broken rule raises ``SliceError`` (invalid_argument) naming its field; nothing else is raised.
    ``memory`` may be "" when a profile is given (what the profile gives: ``memory_mib`` 0)."""
    mode = parse_mode(_text(request.mode, "mode", "one of " + ", ".join(SLICE_MODES)))
    compute = _integer(request.compute, "compute", 0, MAX_COMPUTE,
                       f"an integer 0-{MAX_COMPUTE} (percent of one card; 0 = unlimited)")
    profile_given = isinstance(request.profile, str) and request.profile != ""
    memory_mib = 0 if profile_given and request.memory == "" else parse_memory(request.memory)
    device = parse_device(request.device)
    profile = _profile(request, mode, device)
    placement_start = _placement_start(request, profile)
    owner = _owner(request)
    priority = _integer(request.priority, "priority", 0, MAX_PRIORITY, f"an integer 0-{MAX_PRIORITY} (higher is more important)")
    return SliceSpec(mode=mode, compute=compute, memory_mib=memory_mib, device=device, owner=owner, priority=priority,
                     profile=profile, placement_start=placement_start)


def to_request(spec: SliceSpec) -> SliceRequest:
    """The request that parses back into ``spec`` (``parse_request(to_request(s)) == s``)."""
    return SliceRequest(
        mode=spec.mode, memory=format_memory(spec.memory_mib) if spec.memory_mib else "", compute=spec.compute,
        device="" if spec.device.any else str(spec.device), pod_uid=spec.owner.pod_uid,
        container=spec.owner.container, owner_id=spec.owner.owner_id, priority=spec.priority,
        profile=spec.profile, placement_start=spec.placement_start,
    )


def check_fits_card(spec: SliceSpec, card_memory_mib: int, reserve_mib: int = 0) -> None:
    """Refuse (invalid_argument, ``memory``) a slice asking more memory than the card can ever give
    slices: all it has (MiB, NVML ``memory.total``) less ``reserve_mib`` (a TDM card's
    ``slicer.memory_reserve_mib``), so no retry can succeed; what is free now is admission's
    business (resource_exhausted), not the spec's."""
    usable = card_memory_mib - reserve_mib
    if spec.memory_mib > usable:
        rule = (f"at most what the card can give slices ({usable} MiB: {card_memory_mib} MiB less the {reserve_mib} MiB "
                "reserve)" if reserve_mib else f"at most the card's memory ({card_memory_mib} MiB)")
        raise _refuse("memory", rule, format_memory(spec.memory_mib))
