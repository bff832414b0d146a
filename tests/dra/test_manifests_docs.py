"""docs/dra.md against the code: every configuration key of ``runtimekit dra serve``
(kube/dra/config.py ``SCHEMA``) has a row in its table with its default, no row names a key that
does not exist, and the example file loads and says the defaults."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from runtimekit.kube.dra.config import SCHEMA, load
from runtimekit.schema import REQUIRED

DOC = Path(__file__).resolve().parents[2] / "docs" / "dra.md"


def configuration_section() -> str:
    text = DOC.read_text()
    start = text.index("### Configuration")
    return text[start:text.index("\n### ", start + 1)]


def rows() -> dict[str, list[str]]:
    """key -> the cells of its row in the configuration table."""
    found = {}
    for line in configuration_section().splitlines():
        if match := re.match(r"\| `([a-z_.]+)` \|(.*)\|$", line):
            found[match[1]] = [cell.strip() for cell in match[2].split("|")]
    return found


def documented(default: Any) -> str:
    if default is REQUIRED:
        return "required"
    if default is None:
        return "`null`"
    if isinstance(default, float) and default.is_integer():
        return f"`{int(default)}`"
    return f"`{default}`"


def test_every_key_has_a_row_with_its_default():
    table = rows()
    assert set(table) == set(SCHEMA)
    for key, spec in SCHEMA.items():
        assert table[key][0].startswith(documented(spec.default)), f"{key}: the table says {table[key][0]!r}"


def test_the_example_file_loads_and_says_the_defaults(tmp_path):
    (block,) = re.findall(r"```yaml\n(.*?)```", configuration_section(), re.S)
    path = tmp_path / "dra.yaml"
    path.write_text(block)
    assert load(path, {"node_name": "gpu-node-1"}) == load(None, {"node_name": "gpu-node-1"})
