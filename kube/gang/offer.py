"""What a node offers a gang: its free healthy GPUs by NVLink-connected group, its free RDMA NICs
by PCIe root. Pure: data in, data out.

Definitions (the placer's whole notion of fit):

- **NVLink-connected group**: the GPUs a node's driver publishes with the same ``nvlinkDomain``
  value; every two of them are joined by NVLink, directly or through NVSwitch (an HGX/DGX H100,
  H200 or A100 board is one group of 8; PCIe cards with NVLink bridges are groups of 2). A GPU
  published without ``nvlinkDomain`` is a group of its own. A group's size here is its count of
  **free** healthy GPUs.
- **A pod asking g GPUs** takes g free GPUs from **one** group when g > 1 (one NVLink domain: the
  collective inside the pod never crosses PCIe); g = 1 takes any free GPU. So a node holds
  ``sum(free_k // g)`` such pods by GPUs.
- **A pod asking n NICs** takes n free RDMA NICs of the node, from any PCIe roots (the node's own
  allocator pairs them with the pod's GPUs at admission): ``nics_free // n`` pods by NICs.
- ``pods(g, n)`` is the smaller of the two (n = 0: NICs do not limit).

The annotation ``runtimekit.io/offer`` (written by the device plugin where DRA is not used) is JSON,
version 1, every key required and no other::

    {"v": 1, "gpus_free": 6, "nvlink_groups": [4, 2], "nics_free_by_root": {"pci0000:15": 1}}

``gpus_free`` equals the sum of ``nvlink_groups`` (each a group's free GPUs); a new field makes a
new version, which this reader refuses by name rather than misread. ``slices.py`` reads the same
offer from the node's ResourceSlices.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtimekit.documents import DocumentError, load_json
from runtimekit.schema import ConfigError, Key, at_least, check_shape

__all__ = ["OFFER_ANNOTATION", "OFFER_VERSION", "NvlinkGroup", "Offer", "OfferError", "offer_annotation",
           "offer_from_mapping", "parse_offer_annotation", "pods_fit"]

OFFER_ANNOTATION = "runtimekit.io/offer"
OFFER_VERSION = 1
MAX_ANNOTATION_BYTES = 64 * 1024  # a node's annotations total at most 256 KiB (apimachinery TotalAnnotationSizeLimitB)
MAX_GROUPS = 1024
_COUNT = Key(int, 0, "a count", at_least(0))
_SHAPE_V1 = {"v": Key(int, OFFER_VERSION, "format version", allowed=(OFFER_VERSION,)), "gpus_free": _COUNT,
             "nvlink_groups": [_COUNT], "nics_free_by_root": {"...": _COUNT}}


class OfferError(ConfigError):
    """An offer that cannot be read; the message names the field and the rule."""


@dataclass(frozen=True, slots=True)
class NvlinkGroup:
    """One NVLink-connected group: its name (the nvlinkDomain value, or its position in the
    annotation's list) and its free healthy GPUs."""

    name: str
    free: int


@dataclass(frozen=True, slots=True)
class Offer:
    """A node's free devices: groups largest first (then by name); NICs by PCIe root, sorted by root."""

    groups: tuple[NvlinkGroup, ...] = ()
    nics: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, groups: Mapping[str, int] | Sequence[int], nics: Mapping[str, int] | None = None) -> Offer:
        """An offer from free GPUs per group (a mapping by name, or a list named by position) and free
        NICs per PCIe root; empty groups and roots are left out."""
        named = groups.items() if isinstance(groups, Mapping) else ((str(i), n) for i, n in enumerate(groups))
        kept = sorted((NvlinkGroup(str(name), free) for name, free in named if free > 0), key=lambda g: (-g.free, g.name))
        return cls(tuple(kept), tuple(sorted((root, n) for root, n in (nics or {}).items() if n > 0)))

    @property
    def gpus_free(self) -> int:
        return sum(group.free for group in self.groups)

    @property
    def largest_group(self) -> int:
        return max((group.free for group in self.groups), default=0)

    @property
    def nics_free(self) -> int:
        return sum(n for _, n in self.nics)

    def pods(self, gpus: int, nics: int = 0) -> int:
        """How many pods of ``gpus`` GPUs and ``nics`` NICs this node holds (module docstring)."""
        return pods_fit([group.free for group in self.groups], self.nics_free, gpus, nics)


def pods_fit(group_free: Sequence[int], nics_free: int, gpus: int, nics: int) -> int:
    """Pods of ``gpus`` GPUs (one NVLink group each when > 1; ``gpus`` >= 1) and ``nics`` NICs that
    fit free GPUs ``group_free`` (per group) and ``nics_free`` NICs."""
    by_gpus = sum(group_free) if gpus == 1 else sum(free // gpus for free in group_free)
    return by_gpus if nics == 0 else min(by_gpus, nics_free // nics)


def offer_from_mapping(data: Any, where: str = OFFER_ANNOTATION) -> Offer:
    """The offer of a version-1 mapping (module docstring); OfferError naming ``where``'s field and rule."""
    version = data.get("v") if isinstance(data, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and version != OFFER_VERSION:
        raise OfferError(f"{where}.v: version {version} is not readable here (this placer reads version {OFFER_VERSION})")
    check_shape(data, _SHAPE_V1, where, OfferError)
    groups: list[int] = data["nvlink_groups"]
    if len(groups) > MAX_GROUPS:
        raise OfferError(f"{where}.nvlink_groups: at most {MAX_GROUPS} groups, got {len(groups)}")
    if data["gpus_free"] != sum(groups):
        raise OfferError(f"{where}.gpus_free: must equal the sum of nvlink_groups ({sum(groups)}), got {data['gpus_free']}")
    return Offer.of(groups, data["nics_free_by_root"])


def parse_offer_annotation(text: str, where: str = OFFER_ANNOTATION) -> Offer:
    """The offer in an annotation's JSON text; OfferError naming the field and the rule."""
    try:
        data = load_json(text, what=where, max_bytes=MAX_ANNOTATION_BYTES)
    except DocumentError as error:
        raise OfferError(str(error)) from None
    return offer_from_mapping(data, where)


def offer_annotation(offer: Offer) -> str:
    """The annotation's JSON text for ``offer`` (groups largest first, roots sorted): what the
    device plugin writes; ``parse_offer_annotation`` reads it back to an equal offer, group names
    aside (the annotation names groups by position)."""
    return json.dumps({"v": OFFER_VERSION, "gpus_free": offer.gpus_free, "nvlink_groups": [g.free for g in offer.groups],
                       "nics_free_by_root": dict(offer.nics)}, separators=(",", ":"))
