"""docs/metrics.md names the configuration as it is: only keys the agent knows (``exporter.*``), no
collector options a user cannot set, the fixed limits of the command line as the code has them, and
every collector in its table of collectors."""

from __future__ import annotations

import re
from pathlib import Path

from runtimekit.config import SCHEMA
from runtimekit.exporter.collectors.cmdline import CommandRedactor
from runtimekit.exporter.registry import COLLECTOR_NAMES

DOC = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text(encoding="utf-8")


def _collector_table() -> list[str]:
    table = DOC.split("| Collector | What |", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \|", table, re.MULTILINE)


def test_the_table_of_collectors_lists_every_collector_in_order():
    assert _collector_table() == list(COLLECTOR_NAMES)


def test_every_exporter_key_named_is_a_key_of_the_agent():
    named = set(re.findall(r"`(exporter\.[a-z_]+)", DOC))
    assert named >= {"exporter.collectors", "exporter.process_cmdline", "exporter.cmdline_redact"}
    assert sorted(named - set(SCHEMA)) == []


def test_no_setting_is_named_that_a_user_cannot_set():
    for phrase in ("options:", "`cmdline: true`", "cmdline_max_length"):
        assert phrase not in DOC, phrase


def test_the_command_lines_limits_are_the_codes():
    redactor = CommandRedactor()
    truncated = re.search(r"truncated to (\d+) characters \(a fixed limit", DOC)
    read = re.search(r"At most (\d+) characters of the command line", DOC)
    assert truncated is not None and int(truncated.group(1)) == redactor.max_length
    assert read is not None and int(read.group(1)) == redactor.input_limit
