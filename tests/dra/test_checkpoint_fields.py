"""A DRA driver checkpoint whose fields are not what this version writes is refused naming the field
and the rule (kube/dra/checkpoint.py), never with a bare TypeError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtimekit.kube.dra.checkpoint import Checkpoint, CheckpointError

UID = "aaaaaaaa-0000-0000-0000-000000000001"
DEVICE = {"request": "share", "pool": "node-a", "device": "gpu-2", "position": 0, "kind": "tdm", "cdi_ids": []}


def claim(**fields: object) -> dict[str, object]:
    return {"namespace": "n", "name": "a", "state": "completed", "devices": [dict(DEVICE)], **fields}


def device(**fields: object) -> dict[str, object]:
    return claim(devices=[{**DEVICE, **fields}])


@pytest.mark.parametrize(("claims", "rule"), [
    ({"x": 5}, "claims.x: must be a mapping, got int 5"),
    ([], "claims: must be a mapping, got list []"),
    ({UID: claim(name=7)}, f"claims.{UID}.name: must be a string, got int 7"),
    ({UID: claim(state=None)}, f"claims.{UID}.state: must be a string, got null"),
    ({UID: claim(devices={"a": 1})}, f"claims.{UID}.devices: must be a list, got dict {{'a': 1}}"),
    ({UID: claim(devices=["gpu-0"])}, f"claims.{UID}.devices[0]: must be a mapping, got str 'gpu-0'"),
    ({UID: device(position="0")}, f"claims.{UID}.devices[0].position: must be an integer, got str '0'"),
    ({UID: device(position=True)}, f"claims.{UID}.devices[0].position: must be an integer, got a boolean"),
    ({UID: device(cdi_ids="runtimekit.io/slice=s-1")},
     f"claims.{UID}.devices[0].cdi_ids: must be a list, got str 'runtimekit.io/slice=s-1'"),
    ({UID: device(cdi_ids=[1])}, f"claims.{UID}.devices[0].cdi_ids[0]: must be a string, got int 1"),
    ({UID: device(share_id=None)}, f"claims.{UID}.devices[0].share_id: must be a string, got null"),
    ({UID: device(admin_access="yes")}, f"claims.{UID}.devices[0].admin_access: must be true or false, got str 'yes'"),
    ({UID: claim(devices=[{"request": "r"}])}, f"claims.{UID}.devices[0].pool: required key is missing"),
])
def test_a_field_of_another_type_is_named_with_its_rule(tmp_path: Path, claims: object, rule: str) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text(json.dumps({"version": 1, "claims": claims}))
    with pytest.raises(CheckpointError) as caught:
        Checkpoint.load(path)
    assert str(caught.value).startswith(f"{path}: not a DRA driver checkpoint: {rule}"), caught.value
    assert "\n" not in str(caught.value)


def test_what_this_version_writes_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    full = {**DEVICE, "share_id": "5e5e", "slice_id": "s-1", "cdi_ids": ["runtimekit.io/slice=s-1"], "admin_access": True}
    path.write_text(json.dumps({"version": 1, "claims": {UID: claim(devices=[full]), "b": claim(state="started", devices=[])}}))
    claims = Checkpoint.load(path).claims
    assert claims[UID].devices[0].cdi_ids == ("runtimekit.io/slice=s-1",) and claims[UID].devices[0].share_id == "5e5e"
    assert claims[UID].devices[0].admin_access and not claims["b"].devices
    assert claims["b"].state == "started" and claims["b"].devices == ()
