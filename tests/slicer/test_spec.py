"""Slice spec validation (runtimekit.slicer.spec): the issue's boundaries, one table of refusals
naming their field, and properties: every valid request parses and round-trips, every invalid one
raises SliceError naming the broken field and nothing else."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtimekit.slicer.spec import check_fits_card, format_memory, parse_device, parse_memory, parse_request, to_request
from runtimekit.state.slices import DeviceSelector, Owner, SliceError, SliceRequest

POD = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
GPU = "GPU-fe447eaf-b90a-4137-9cde-91d400b091db"


def request(**changes: Any) -> SliceRequest:
    return dataclasses.replace(SliceRequest(mode="tdm", memory="2GiB", compute=50, owner_id="alice"), **changes)


def refusal(req: SliceRequest) -> SliceError:
    with pytest.raises(SliceError) as caught:
        parse_request(req)
    assert caught.value.code == "invalid_argument"
    return caught.value


@pytest.mark.parametrize("compute", [0, 1, 100])
def test_compute_boundaries_accepted(compute: int) -> None:
    assert parse_request(request(compute=compute)).compute == compute


@pytest.mark.parametrize("compute", [101, -1, True, "50", 50.0])
def test_compute_outside_0_100_or_not_an_integer_is_refused(compute: object) -> None:
    error = refusal(request(compute=compute))
    assert error.field == "compute"
    assert str(error) == f"compute: an integer 0-100 (percent of one card; 0 = unlimited), got {compute!r}"


@pytest.mark.parametrize(("text", "mib"), [("128MiB", 128), ("2GiB", 2048), ("1GiB", 1024), ("0256MiB", 256), ("1024GiB", 1 << 20)])
def test_memory_parses_to_mib(text: str, mib: int) -> None:
    assert parse_memory(text) == mib


@pytest.mark.parametrize(("text", "rule"), [
    ("129MiB", "a multiple of 128 MiB"),
    ("0MiB", "greater than 0"),
    ("0GiB", "greater than 0"),
    ("1025GiB", "at most 1024GiB"),
    ("99999999999999999999999GiB", "at most 1024GiB"),
    ("2 GiB", "NGiB or NMiB with N a whole number (MiB a multiple of 128), no spaces"),
    ("2GB", "NGiB or NMiB with N a whole number (MiB a multiple of 128), no spaces"),
    ("1.5GiB", "NGiB or NMiB with N a whole number (MiB a multiple of 128), no spaces"),
    ("-2GiB", "NGiB or NMiB with N a whole number (MiB a multiple of 128), no spaces"),
    ("2gib", "NGiB or NMiB with N a whole number (MiB a multiple of 128), no spaces"),
    ("", "NGiB or NMiB with N a whole number (MiB a multiple of 128), no spaces"),
])
def test_memory_refusals_name_the_rule(text: str, rule: str) -> None:
    error = refusal(request(memory=text))
    assert (error.field, str(error)) == ("memory", f"memory: {rule}, got {text!r}")


def test_memory_over_the_cards_capacity_is_refused_by_check_fits_card() -> None:
    spec = parse_request(request(memory="80GiB"))
    check_fits_card(spec, 81920)  # exactly the card: fits
    with pytest.raises(SliceError) as caught:
        check_fits_card(spec, 40960)
    assert (caught.value.code, caught.value.field) == ("invalid_argument", "memory")
    assert str(caught.value) == "memory: at most the card's memory (40960 MiB), got '80GiB'"


@pytest.mark.parametrize(("text", "selector"), [
    ("", DeviceSelector()), ("any", DeviceSelector()), ("0", DeviceSelector(index=0)), ("7", DeviceSelector(index=7)),
    (GPU, DeviceSelector(uuid=GPU)),
])
def test_device_forms(text: str, selector: DeviceSelector) -> None:
    assert parse_device(text) == selector


@pytest.mark.parametrize("text", ["-1", "1024", "ANY", "GPU-123", "MIG-fe447eaf-b90a-4137-9cde-91d400b091db", " 1", "1.0"])
def test_bad_devices_are_refused(text: str) -> None:
    assert refusal(request(device=text)).field == "device"


@pytest.mark.parametrize(("changes", "field"), [
    ({"mode": "TDM"}, "mode"),
    ({"mode": ""}, "mode"),
    ({"owner_id": ""}, "owner_id"),
    ({"owner_id": "bad owner"}, "owner_id"),
    ({"owner_id": "x" * 129}, "owner_id"),
    ({"owner_id": "-leading-dash"}, "owner_id"),
    ({"owner_id": "", "pod_uid": POD}, "container"),
    ({"owner_id": "", "pod_uid": POD, "container": "Main"}, "container"),
    ({"owner_id": "", "pod_uid": POD.upper(), "container": "main"}, "pod_uid"),
    ({"owner_id": "", "pod_uid": "not-a-uid", "container": "main"}, "pod_uid"),
    ({"pod_uid": POD, "container": "main"}, "owner_id"),  # both owner forms
    ({"container": "main"}, "container"),  # a container without its pod
    ({"priority": -1}, "priority"),
    ({"priority": 101}, "priority"),
    ({"priority": False}, "priority"),
])
def test_refusals_name_their_field(changes: dict[str, Any], field: str) -> None:
    error = refusal(request(**changes))
    assert error.field == field
    assert str(error).startswith(f"{field}: ") and ", got " in str(error)


def test_a_pod_owner_parses() -> None:
    spec = parse_request(request(owner_id="", pod_uid=POD, container="main", priority=100, mode="mig"))
    assert (spec.owner, spec.priority, spec.mode) == (Owner(pod_uid=POD, container="main"), 100, "mig")


def test_the_first_broken_rule_in_field_order_is_reported() -> None:
    assert refusal(request(mode="x", compute=101, memory="0MiB")).field == "mode"
    assert refusal(request(compute=101, memory="0MiB")).field == "compute"


# --- properties -------------------------------------------------------------------------------

_HEX = "0123456789abcdef"
_LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", fullmatch=True)
_OWNER = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}", fullmatch=True)
_UUID = st.tuples(*(st.text(_HEX, min_size=n, max_size=n) for n in (8, 4, 4, 4, 12))).map("-".join)
_MEMORY = st.one_of(st.integers(1, 1024).map(lambda n: f"{n}GiB"), st.integers(1, 8192).map(lambda n: f"{n * 128}MiB"))
_DEVICE = st.one_of(st.sampled_from(["", "any"]), st.integers(0, 1023).map(str), _UUID.map(lambda u: "GPU-" + u))
_OWNER_FIELDS = st.one_of(
    st.builds(lambda uid, name: {"pod_uid": uid, "container": name, "owner_id": ""}, _UUID, _LABEL),
    _OWNER.map(lambda name: {"pod_uid": "", "container": "", "owner_id": name}),
)
VALID = st.builds(
    lambda mode, memory, compute, device, owner, priority: SliceRequest(mode, memory, compute, device, priority=priority, **owner),
    st.sampled_from(["tdm", "mig"]), _MEMORY, st.integers(0, 100), _DEVICE, _OWNER_FIELDS, st.integers(0, 100),
)

# One field made invalid at a time: (field, strategy of bad values).
_ANYTHING = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False), st.binary(max_size=4))
INVALID = {
    "mode": st.one_of(_ANYTHING, st.text(max_size=6).filter(lambda t: t not in ("tdm", "mig"))),
    "memory": st.one_of(_ANYTHING, st.text(max_size=12), st.integers(1, 1 << 20).filter(lambda n: n % 128).map(lambda n: f"{n}MiB"),
                        st.integers(1025, 1 << 40).map(lambda n: f"{n}GiB"), st.just("0MiB")),
    "compute": st.one_of(_ANYTHING, st.integers(max_value=-1), st.integers(min_value=101)),
    "device": st.one_of(_ANYTHING, st.integers(max_value=-1).map(str), st.integers(min_value=1024).map(str),
                        st.text(max_size=8).filter(lambda t: t not in ("", "any") and not t.isdigit())),
    "priority": st.one_of(_ANYTHING, st.integers(max_value=-1), st.integers(min_value=101)),
}


@given(VALID)
def test_every_valid_request_parses_and_round_trips(req: SliceRequest) -> None:
    spec = parse_request(req)
    assert parse_request(to_request(spec)) == spec
    assert parse_memory(format_memory(spec.memory_mib)) == spec.memory_mib == parse_memory(req.memory)


@given(VALID, st.sampled_from(sorted(INVALID)), st.data())
def test_every_invalid_field_is_refused_naming_it(req: SliceRequest, field: str, data: st.DataObject) -> None:
    bad: Any = data.draw(INVALID[field])
    error = refusal(dataclasses.replace(req, **{field: bad}))
    assert error.field == field
    assert str(error).startswith(f"{field}: ") and str(error).endswith(f", got {bad!r}")


@given(st.builds(SliceRequest, mode=st.text(max_size=4), memory=st.text(max_size=10), compute=st.integers(-5, 105),
                 device=st.text(max_size=6), pod_uid=st.text(max_size=4), container=st.text(max_size=4),
                 owner_id=st.text(max_size=6), priority=st.integers(-5, 105)))
def test_any_request_parses_or_raises_slice_error_only(req: SliceRequest) -> None:
    try:
        spec = parse_request(req)
    except SliceError as error:
        assert error.code == "invalid_argument"
        assert error.field in {"mode", "memory", "compute", "device", "pod_uid", "container", "owner_id", "priority"}
    else:
        assert parse_request(to_request(spec)) == spec


# --- profile and placement_start --------------------------------------------------------------

def mig_named(**changes: Any) -> SliceRequest:
    return request(**{"mode": "mig", "memory": "", "compute": 0, "device": "0", "profile": "1g.10gb", **changes})


def test_a_named_profile_needs_no_memory_or_compute_and_keeps_its_placement() -> None:
    spec = parse_request(mig_named(placement_start=3))
    assert (spec.profile, spec.placement_start, spec.memory_mib, spec.compute) == ("1g.10gb", 3, 0, 0)
    assert parse_request(to_request(spec)) == spec
    given = parse_request(mig_named(memory="5GiB", compute=10, device=GPU))
    assert (given.memory_mib, given.compute, given.device, given.placement_start) == (5120, 10, DeviceSelector(uuid=GPU), None)


@pytest.mark.parametrize(("changes", "field", "message"), [
    ({"mode": "tdm"}, "profile", "profile: only with mode 'mig' (a partition profile), not mode 'tdm', got '1g.10gb'"),
    ({"device": ""}, "profile", "profile: only with a device given as a GPU index or UUID (a profile is one card's), "
                                "not device '', got '1g.10gb'"),
    ({"device": "any"}, "profile", "profile: only with a device given as a GPU index or UUID (a profile is one card's), "
                                   "not device 'any', got '1g.10gb'"),
    ({"profile": "1g 10gb"}, "profile", "profile: '' or a MIG profile's name as GetNode lists it (1-64 of letters, digits "
                                        "and . + -, e.g. 1g.10gb), got '1g 10gb'"),
    ({"profile": 19, "memory": "1GiB"}, "profile", "profile: '' or a MIG profile's name as GetNode lists it (1-64 of letters, digits "
                                 "and . + -, e.g. 1g.10gb), got 19"),
    ({"profile": "", "memory": "1GiB", "placement_start": 0}, "placement_start",
     "placement_start: only with a profile (a placement is one profile's), got 0"),
    ({"placement_start": -1}, "placement_start",
     "placement_start: absent, or an integer 0-4294967295 (the memory slice the partition starts at), got -1"),
    ({"placement_start": True}, "placement_start",
     "placement_start: absent, or an integer 0-4294967295 (the memory slice the partition starts at), got True"),
    ({"profile": ""}, "memory", "memory: NGiB or NMiB with N a whole number (MiB a multiple of 128), no spaces, got ''"),
])
def test_profile_and_placement_refusals_name_their_field_and_rule(changes: dict[str, Any], field: str, message: str) -> None:
    error = refusal(mig_named(**changes))
    assert (error.field, str(error)) == (field, message)


@given(VALID, st.sampled_from(["1g.10gb", "3g.40gb", "1g.10gb+me", "1c.2g.20gb"]), st.one_of(st.none(), st.integers(0, 7)),
       st.booleans())
def test_every_valid_named_profile_request_round_trips(req: SliceRequest, profile: str, start: int | None,
                                                       memory_given: bool) -> None:
    named = dataclasses.replace(req, mode="mig", device=req.device if req.device not in ("", "any") else "0", profile=profile,
                                placement_start=start, memory=req.memory if memory_given else "")
    spec = parse_request(named)
    assert (spec.profile, spec.placement_start, spec.memory_mib == 0) == (profile, start, not memory_given)
    assert parse_request(to_request(spec)) == spec
