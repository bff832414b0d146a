"""network.py: tiers (presets, label keys, their validation) and the tree of domains (a missing
label is a domain of its own; a leaf is known by its whole path)."""

from __future__ import annotations

import pytest

from runtimekit.kube.gang.network import PRESETS, Network, Tiers, label_key_problem


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_is_three_valid_tiers(preset: str) -> None:
    tiers = Tiers.preset(preset)
    assert tiers.depth == 3
    assert all(label_key_problem(key) is None for key in tiers.keys)
    assert [tiers.level_name(level) for level in (0, 4)] == ["node", "cluster"]
    assert tiers.level_of(tiers.names[-1]) == 1 and tiers.level_of(tiers.keys[0]) == 3


def test_the_default_is_topograph() -> None:
    assert Tiers.preset().names == ("core", "spine", "leaf")
    assert Tiers.of_keys(["a.io/block", "rack"]).names == ("block", "rack")


@pytest.mark.parametrize(("keys", "names", "message"), [
    ((), (), "at least one label key"),
    (("a/b",), ("x", "y"), "one name per label key"),
    (("Bad/key",), ("x",), "its prefix must be a lower-case DNS subdomain"),
    (("a.io/-x",), ("x",), "its name must be 1-63 characters"),
    (("a.io/x", "a.io/x"), ("x", "y"), "each label key may appear once"),
    (("a.io/x",), ("node",), "short names must differ"),
])
def test_bad_tiers_are_refused_by_rule(keys: tuple[str, ...], names: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Tiers(keys, names)


def test_unknown_preset_lists_the_presets() -> None:
    with pytest.raises(ValueError, match="presets: eks, gke, topograph, topograph-fabric"):
        Tiers.preset("aks")


def test_domains_are_paths_and_a_missing_label_is_its_own_domain() -> None:
    tiers = Tiers.of_keys(["x.io/spine", "x.io/leaf"])
    network = Network(tiers)
    a = network.add_node("a", {"x.io/spine": "s1", "x.io/leaf": "l1"})
    b = network.add_node("b", {"x.io/spine": "s2", "x.io/leaf": "l1"})  # same leaf name, other spine
    c = network.add_node("c", {"x.io/spine": "s1", "x.io/leaf": "l1"})
    d = network.add_node("d", {"x.io/spine": "s1"})  # no leaf label
    assert network.ancestor(a, 1) == network.ancestor(c, 1) != network.ancestor(b, 1)
    assert network.ancestor(d, 1) not in {network.ancestor(n, 1) for n in (a, b, c)}
    assert network.ancestor(d, 2) == network.ancestor(a, 2)
    assert network.count(0) == 4 and network.count(1) == 3 and network.count(2) == 2 and network.count(3) == 1
    assert network.describe(1, network.ancestor(b, 1)) == "leaf s2/l1"
    assert network.describe(2, network.ancestor(a, 2)) == "spine s1"
    assert network.describe(3, 0) == "cluster" and network.describe(0, d) == "d"
    assert network.path_of("d", {"x.io/spine": "s1", "x.io/leaf": ""}) == ("s1", "(d)")
