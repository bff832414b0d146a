"""The shared vocabulary: PCI addresses in one spelling, kubelet device ids parsed in one place."""

from __future__ import annotations

import pytest

from runtimekit.state.refs import DeviceId, PciAddress, normal_pci, parse_device_id


@pytest.mark.parametrize(
    "spelling",
    ["00000000:18:00.0", "0000:18:00.0", "18:00.0", "00000000:18:00.0 ", "0000:18:00.0".upper()],
)
def test_every_spelling_of_one_address_is_one_address(spelling: str) -> None:
    assert normal_pci(spelling) == "0000:18:00.0"  # NVML, nvidia-smi, sysfs and short forms
    assert PciAddress.parse(spelling).nvml == "00000000:18:00.0"


def test_addresses_order_by_domain_bus_device_function() -> None:
    found = sorted(PciAddress.parse(text) for text in ["0001:00:00.0", "0000:c1:00.0", "0000:18:00.1", "0000:18:00.0"])
    assert [str(address) for address in found] == ["0000:18:00.0", "0000:18:00.1", "0000:c1:00.0", "0001:00:00.0"]


@pytest.mark.parametrize("bad", ["", "18:00", "zz:00.0", "0000:18:00.8", "100000000:18:00.0", "1ffff:18:00.0"])
def test_a_bad_address_names_the_rule(bad: str) -> None:
    with pytest.raises(ValueError, match="PCI address: "):
        PciAddress.parse(bad)


@pytest.mark.parametrize(
    "device_id, parsed",
    [
        ("GPU-3a0c2b6e-1111-2222-3333-444455556666", DeviceId("gpu", "GPU-3a0c2b6e-1111-2222-3333-444455556666")),
        ("GPU-3a0c::4", DeviceId("replica", "GPU-3a0c", 4)),
        ("MIG-0d5c1b2a-aaaa-bbbb-cccc-ddddeeeeffff", DeviceId("mig", "MIG-0d5c1b2a-aaaa-bbbb-cccc-ddddeeeeffff")),
        ("GPU-3a0c::x", None),
        ("MIG-0d5c::1", None),
        ("GPU-", None),
        ("0000:18:00.0", None),  # another plugin's id: not ours
    ],
)
def test_kubelet_device_ids(device_id: str, parsed: DeviceId | None) -> None:
    assert parse_device_id(device_id) == parsed


def test_only_whole_gpus_and_replicas_name_their_gpu() -> None:
    assert parse_device_id("GPU-a::2").gpu_uuid == "GPU-a"  # type: ignore[union-attr]
    assert parse_device_id("MIG-b").gpu_uuid is None  # type: ignore[union-attr]
