"""Reading a ResourceClaim (kube/dra/claims.py): its allocation parsed into results and opaque
configurations, refusals that name the field, which configuration applies to which result, and
the official client's reader against the fake API server (tests/kube_fake_resource.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from runtimekit.kube.dra.claims import (
    ClaimError,
    ClaimReadError,
    KubernetesClaimReader,
    Result,
    base_request,
    config_for,
    parse_claim,
)
from runtimekit.kube.kubeclient import api_client
from tests.dra.dra_claims import DRIVER, NODE, Alloc, Config, ref_of, resource_claim, slice_config
from tests.kube_fake_resource import FakeResourceApi
from tests.kube_fakes import serve

OTHER_DRIVER = "gpu.nvidia.com"


def mixed_claim() -> dict[str, Any]:
    return resource_claim("mixed", [
        Alloc("share", "gpu-2", "tdm", consumed={"compute": "50", "memory": "2Gi"}),
        Alloc("mig/small", "gpu-0-mig-1g10gb-19-3", "mig"),
        Alloc("theirs", "gpu-0", driver=OTHER_DRIVER),
        Alloc("nic", "nic-mlx5-0", "nic"),
    ], configs=[Config(slice_config(compute=40), ("share",)), Config({"sharing": "mps"}, driver=OTHER_DRIVER)],
        class_configs=[Config(slice_config(), ("share",))])


def test_an_allocation_is_parsed_result_by_result() -> None:
    obj = mixed_claim()
    claim = parse_claim(ref_of(obj), obj)
    share_id = obj["status"]["allocation"]["devices"]["results"][0]["shareID"]
    assert claim.results == (
        Result(0, "share", DRIVER, NODE, "gpu-2", share_id=share_id, consumed={"compute": "50", "memory": "2Gi"}),
        Result(1, "mig/small", DRIVER, NODE, "gpu-0-mig-1g10gb-19-3"),
        Result(2, "theirs", OTHER_DRIVER, NODE, "gpu-0"),
        Result(3, "nic", DRIVER, NODE, "nic-mlx5-0"),
    )
    assert [(entry.source, entry.driver) for entry in claim.configs] == [
        ("FromClass", DRIVER), ("FromClaim", DRIVER), ("FromClaim", OTHER_DRIVER)]


def test_the_claims_own_configuration_wins_over_its_class() -> None:
    obj = mixed_claim()
    claim = parse_claim(ref_of(obj), obj)
    index, entry = config_for(claim, claim.results[0], DRIVER) or (None, None)
    assert (index, entry and entry.source, entry and entry.parameters) == (1, "FromClaim", slice_config(compute=40))
    assert config_for(claim, claim.results[1], DRIVER) is None  # no entry names "mig"
    assert config_for(claim, claim.results[2], OTHER_DRIVER) is not None  # each driver sees its own only


def test_an_entry_for_a_request_covers_its_subrequests_and_one_for_none_covers_all() -> None:
    obj = resource_claim("sub", [Alloc("mig/small", "gpu-0-mig-1g10gb-19-3", "mig"), Alloc("other", "gpu-3")],
                         configs=[Config(slice_config(compute=10), ("mig",))], class_configs=[Config(slice_config())])
    claim = parse_claim(ref_of(obj), obj)
    assert config_for(claim, claim.results[0], DRIVER)[1].parameters == slice_config(compute=10)  # type: ignore[index]
    assert config_for(claim, claim.results[1], DRIVER)[1].parameters == slice_config()  # type: ignore[index]
    assert [base_request(r.request) for r in claim.results] == ["mig", "other"]


def test_a_claim_made_again_under_the_same_name_is_refused() -> None:
    obj = mixed_claim()
    ref = ref_of(obj)
    obj["metadata"]["uid"] = "00000000-0000-0000-0000-000000000000"
    with pytest.raises(ClaimError, match="has uid 00000000-0000-0000-0000-000000000000: it was replaced"):
        parse_claim(ref, obj)


def test_a_claim_not_allocated_is_refused() -> None:
    obj = resource_claim("pending", [Alloc("gpu", "gpu-1")], allocated=False)
    with pytest.raises(ClaimError, match=r"not allocated \(status.allocation is empty\)"):
        parse_claim(ref_of(obj), obj)


def _broken(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(mixed_claim())
    target = obj
    for key in path[:-1]:
        target = target[key]
    if value is None:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return obj


RESULTS = ("status", "allocation", "devices", "results")
CONFIGS = ("status", "allocation", "devices", "config")


@pytest.mark.parametrize(("path", "value", "field"), [
    ((*RESULTS, 0, "device"), None, "status.allocation.devices.results[0].device: expected a non-empty string"),
    ((*RESULTS, 1, "pool"), "", "status.allocation.devices.results[1].pool: expected a non-empty string"),
    ((*RESULTS, 2), "gpu-0", "status.allocation.devices.results[2]: expected a mapping"),
    ((*RESULTS, 0, "consumedCapacity"), ["50"], "status.allocation.devices.results[0].consumedCapacity: expected a mapping"),
    ((*CONFIGS, 0, "opaque"), "x", "status.allocation.devices.config[0].opaque: expected a mapping"),
    ((*CONFIGS, 1, "opaque", "driver"), None, "status.allocation.devices.config[1].opaque.driver: expected a non-empty string"),
    (("status", "allocation", "devices"), "x", "status.allocation.devices: expected a mapping"),
    (("status",), "allocated", "status: expected a mapping"),
])
def test_a_malformed_allocation_names_the_field(path: tuple[Any, ...], value: Any, field: str) -> None:
    obj = _broken(path, value)
    with pytest.raises(ClaimError) as caught:
        parse_claim(ref_of(obj), obj)
    assert str(caught.value).startswith(f"{ref_of(obj)}: {field}"), caught.value


def test_a_configuration_that_is_not_opaque_belongs_to_no_driver() -> None:
    obj = mixed_claim()
    obj["status"]["allocation"]["devices"]["config"].append({"source": "FromClaim", "requests": ["share"]})
    obj["status"]["allocation"]["devices"]["config"].insert(0, {"source": "FromClass"})
    claim = parse_claim(ref_of(obj), obj)
    assert [entry.index for entry in claim.configs] == [1, 2, 3]  # positions in the allocation, as messages name them
    assert config_for(claim, claim.results[0], DRIVER)[0] == 2  # type: ignore[index]


async def test_the_official_clients_reader_keeps_every_field_and_maps_errors(tmp_path: Path) -> None:
    api = FakeResourceApi()
    runner, url = await serve(api.app)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(api.kubeconfig(url))
    reader = KubernetesClaimReader(api_client(str(kubeconfig)))
    try:
        stored = api.add_claim(mixed_claim())
        read = await reader.read("default", "mixed")
        assert read is not None
        assert read["status"] == stored["status"]  # consumedCapacity and shareID survive: plain JSON, no models
        assert await reader.read("default", "nothing") is None  # 404
        api.outage = True
        with pytest.raises(ClaimReadError, match="GET ResourceClaim default/mixed: HTTP 503"):
            await reader.read("default", "mixed")
    finally:
        await runner.cleanup()
    with pytest.raises(ClaimReadError, match="GET ResourceClaim default/mixed: "):  # nobody listens any more
        await reader.read("default", "mixed")
