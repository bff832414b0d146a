"""The owner ids of the agent slices the DRA driver makes (kube/dra/names.py): they name the claim,
the position, the driver and its checkpoint, the old form without the last two is still read, and
the longest one passes the agent's own check of ``owner_id``."""

from __future__ import annotations

import pytest

from runtimekit.kube.dra.checkpoint import new_id
from runtimekit.kube.dra.names import DraOwner, owner_id, parse_owner_id
from runtimekit.slicer.spec import parse_request
from runtimekit.state.slices import SliceRequest

UID = "0b5e3c1a-1111-4222-8333-444455556666"


def test_an_owner_id_names_the_claim_the_position_the_driver_and_the_checkpoint() -> None:
    checkpoint = new_id()
    owner = owner_id(UID, 2, "gpu.runtimekit.io", checkpoint)
    assert owner == f"dra:{UID}:2@gpu.runtimekit.io:{checkpoint}"
    assert parse_owner_id(owner) == DraOwner(UID, 2, "gpu.runtimekit.io", checkpoint)


def test_the_old_form_is_read_without_a_driver() -> None:
    assert parse_owner_id(f"dra:{UID}:0") == DraOwner(UID, 0, "", "")


@pytest.mark.parametrize("owner", ["notebook", f"dra:{UID}", f"dra:{UID}:01", f"dra:{UID}:0@gpu.runtimekit.io",
                                   f"dra:{UID}:0@gpu.runtimekit.io:XYZ", f"dra:{UID.upper()}:0"])
def test_other_owners_are_none_of_the_drivers(owner: str) -> None:
    assert parse_owner_id(owner) is None


def test_the_longest_owner_id_passes_the_agents_check() -> None:
    longest = owner_id(UID, 999, "a" * 61 + ".b", "f" * 16)  # a driver name of 63 characters, the most
    assert len(longest) == 125
    parse_request(SliceRequest(mode="tdm", memory="1GiB", owner_id=longest))  # SliceError if refused
    assert parse_owner_id(longest) == DraOwner(UID, 999, "a" * 61 + ".b", "f" * 16)
