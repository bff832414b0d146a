"""offer.py: the fit rules (a pod of more than one GPU in one NVLink group; NICs by count) and the
node annotation runtimekit.io/offer (round trip; every broken rule named)."""

from __future__ import annotations

import json
import re

import pytest

from runtimekit.kube.gang.offer import Offer, OfferError, offer_annotation, parse_offer_annotation, pods_fit


def test_pods_take_one_group_each_and_nics_by_count() -> None:
    offer = Offer.of([3, 3, 2], {"pci0": 2, "pci1": 1})
    assert offer.gpus_free == 8 and offer.largest_group == 3 and offer.nics_free == 3
    assert offer.pods(1) == 8
    assert offer.pods(2) == 3  # 1 + 1 + 1: a pair never spans two groups
    assert offer.pods(4) == 0  # 8 GPUs free, no group of 4
    assert offer.pods(1, 1) == 3 and offer.pods(2, 2) == 1
    assert pods_fit([8], 0, 8, 1) == 0


def test_empty_groups_and_roots_are_left_out_largest_group_first() -> None:
    offer = Offer.of({"b": 2, "a": 0, "c": 4}, {"r1": 0, "r0": 1})
    assert [(g.name, g.free) for g in offer.groups] == [("c", 4), ("b", 2)]
    assert offer.nics == (("r0", 1),)


def test_the_annotation_round_trips() -> None:
    offer = Offer.of([2, 6], {"pci0000:15": 2})
    text = offer_annotation(offer)
    assert json.loads(text) == {"v": 1, "gpus_free": 8, "nvlink_groups": [6, 2], "nics_free_by_root": {"pci0000:15": 2}}
    back = parse_offer_annotation(text)
    assert [g.free for g in back.groups] == [6, 2] and back.nics == offer.nics


@pytest.mark.parametrize(("text", "message"), [
    ("{", "runtimekit.io/offer: not valid JSON"),
    ('{"v": 2, "gpus_free": 0}', "runtimekit.io/offer.v: version 2 is not readable here"),
    ('{"v": 1, "gpus_free": 8, "nvlink_groups": [8]}', "runtimekit.io/offer.nics_free_by_root: required key is missing"),
    ('{"v": 1, "gpus_free": 8, "nvlink_groups": [8], "nics_free_by_root": {}, "x": 1}', "runtimekit.io/offer.x: unknown key"),
    ('{"v": 1, "gpus_free": 8, "nvlink_groups": [-8], "nics_free_by_root": {}}', "runtimekit.io/offer.nvlink_groups[0]: must be >= 0"),
    ('{"v": 1, "gpus_free": 7, "nvlink_groups": [8], "nics_free_by_root": {}}', "gpus_free: must equal the sum of nvlink_groups (8), got 7"),
    ('{"v": 1, "gpus_free": 1, "nvlink_groups": [1], "nics_free_by_root": {"r": "2"}}', "nics_free_by_root.r: must be an integer"),
    ('[1]', "runtimekit.io/offer: expected a mapping"),
])
def test_a_broken_annotation_names_the_field(text: str, message: str) -> None:
    with pytest.raises(OfferError, match=re.escape(message)):
        parse_offer_annotation(text)


def test_too_many_groups_and_too_large_are_refused() -> None:
    groups = [1] * 1025
    with pytest.raises(OfferError, match="at most 1024 groups"):
        parse_offer_annotation(json.dumps({"v": 1, "gpus_free": 1025, "nvlink_groups": groups, "nics_free_by_root": {}}))
    with pytest.raises(OfferError, match="runtimekit.io/offer"):
        parse_offer_annotation(" " * (64 * 1024 + 1))
