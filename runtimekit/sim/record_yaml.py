"""The YAML style of a recorded scenario: the types ``record`` wraps its values in so that the
file reads like the built-in scenarios (hex PCI ids, quoted bus ids and versions, one-line
mappings and lists), and the dumper that writes them."""

from __future__ import annotations

import yaml

__all__ = ["Flow", "FlowList", "Hex", "Dumper", "Q"]


class Hex(int):
    """An int written as 0x233010DE (PCI ids), as in the built-in scenarios."""


class Q(str):
    """A string written double-quoted (bus ids, versions, serials), as in the built-in scenarios."""


class Flow(dict):
    """A mapping written on one line: {sm: 1980, memory: 2619}."""


class FlowList(list):
    """A list written on one line: [0, 0, 1]."""


class Dumper(yaml.SafeDumper):
    pass


Dumper.add_representer(Hex, lambda d, v: d.represent_scalar("tag:yaml.org,2002:int", f"0x{int(v):08X}"))
Dumper.add_representer(Q, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", str(v), style='"'))
Dumper.add_representer(Flow, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v, flow_style=True))
Dumper.add_representer(FlowList, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))
