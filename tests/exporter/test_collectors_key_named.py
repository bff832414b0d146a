"""The collectors' switches are the configuration key ``exporter.collectors``: an error in them
names that key (the agent prints it as its one line at start), as every other configuration error does."""

from __future__ import annotations

from typing import Any

import pytest

from runtimekit.config import SCHEMA
from runtimekit.exporter.registry import KEY, enabled_collectors


def test_the_key_named_is_the_agents_key():
    assert KEY in SCHEMA


def test_an_unknown_collector_names_the_key():
    with pytest.raises(ValueError, match=r"^exporter\.collectors: unknown collector 'nope'; allowed: self, "):
        enabled_collectors({"nope": True})


def test_a_switch_that_is_not_a_boolean_names_the_key():
    switches: dict[str, Any] = {"ecc": "yes"}  # what a YAML file may hold
    with pytest.raises(ValueError, match=r"^exporter\.collectors: collector 'ecc': expected true or false, got 'yes'$"):
        enabled_collectors(switches)
