"""Bounded YAML and JSON documents: alias bombs, depth, size and encoding refused with short errors."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from runtimekit.config import ConfigError
from runtimekit.config import load as load_config
from runtimekit.documents import MAX_MESSAGE, DocumentError, load_json, load_yaml, read_bounded
from runtimekit.sim import SimulatedNode, load_scenario
from runtimekit.sim.control import add_control_routes


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """"Billion laughs" as the value of a known configuration key: ``width ** levels`` strings
    (9^9 = 387 million) from a few hundred bytes; the old loader's error message quoted them all."""
    lines = ["log_level:", "  - &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    for level in range(1, levels):
        lines.append(f"  - &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def refused(text: str | bytes, **bounds: int) -> str:
    with pytest.raises(DocumentError) as caught:
        load_yaml(text, what="cfg.yaml", **bounds)
    message = str(caught.value)
    assert message.startswith("cfg.yaml: ") and len(message) <= MAX_MESSAGE
    return message


def test_alias_bomb_is_refused_at_the_bound_with_a_short_message():
    bomb = alias_bomb()
    assert len(bomb) < 700
    message = refused(bomb)
    assert "aliases expand to more than 10000 nodes" in message and "line " in message


def test_alias_expansion_is_counted_per_use():
    shared = "x: &x [1, 2, 3, 4]\n"  # 5 nodes each time it is used
    assert load_yaml(shared + "y: [*x, *x]\n", what="d", max_alias_nodes=10) == {"x": [1, 2, 3, 4], "y": [[1, 2, 3, 4]] * 2}
    assert "more than 10 nodes" in refused(shared + "y: [*x, *x, *x]\n", max_alias_nodes=10)


def test_recursive_alias_is_refused():
    assert "refers to its own anchor" in refused("a: &a [1, *a]\n")


def test_the_packaged_documents_stay_within_the_defaults():
    scenario = load_scenario("dgx-h100")  # eight GPUs share one aliased NVLink list
    assert len(scenario.gpus) == 8
    assert load_yaml("a: {<<: &b {c: 1}, d: 2}\ne: {<<: *b}\n", what="d") == {"a": {"c": 1, "d": 2}, "e": {"c": 1}}
    assert load_yaml("", what="d") is None


def test_depth_is_bounded_directly_and_through_aliases():
    assert load_yaml("[" * 4 + "]" * 4, what="d", max_depth=4) == [[[[]]]]
    assert "nested deeper than 4 levels" in refused("[" * 5 + "]" * 5, max_depth=4)
    assert "nested deeper than 64 levels" in refused("[" * 100_000 + "]" * 100_000)  # no RecursionError
    deep = "x: &x [[[1]]]\n"  # depth 4 with the top-level mapping
    assert load_yaml(deep + "y: *x\n", what="d", max_depth=4)
    assert "through alias *x" in refused(deep + "y: [*x]\n", max_depth=4)


def test_size_and_encoding_are_checked_before_parsing(tmp_path):
    assert "larger than 10 bytes" in refused("a: 12345678\n", max_bytes=10)
    assert "not UTF-8: invalid byte 0xff at offset 3" in refused(b"a: \xff\n")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a: " + b"x" * 5000)
    with pytest.raises(DocumentError, match="larger than 100 bytes"):
        read_bounded(big, what=str(big), max_bytes=100)


def test_syntax_errors_name_line_and_column_without_echoing_the_input():
    message = refused("a: 1\nb: [" + "x" * 100_000 + "\n")
    assert "not valid YAML" in message and "line 3" in message


def test_json_bounds():
    assert load_json(b'{"a": [1, {"b": null}]}', what="body", max_depth=3) == {"a": [1, {"b": None}]}
    cases = {
        "[" * 4 + "]" * 4: "nested deeper than 3 levels",
        "[" * 200_000 + "]" * 200_000: "larger than",  # size first
        "[" * 50_000 + "]" * 50_000: "nested deeper than 3 levels",  # CPython's scanner would recurse
        b'{"a": "\xc3"}': "not UTF-8",
        '{"a": 1': "not valid JSON: Expecting ',' delimiter (line 1, column 8)",
    }
    for text, rule in cases.items():
        with pytest.raises(DocumentError) as caught:
            load_json(text, what="body", max_depth=3, max_bytes=300_000)
        assert str(caught.value).startswith("body: ") and rule in str(caught.value)
    with pytest.raises(DocumentError, match="nested deeper than 64 levels"):
        load_json("[" * 1_000_000 + "]" * 1_000_000, what="body", max_bytes=2_000_000)


def test_config_file_with_an_alias_bomb_is_a_config_error(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text(alias_bomb(levels=6))  # 531,441 strings: small enough should the bound ever go
    with pytest.raises(ConfigError, match=f"--config: {path}: aliases expand to more than"):
        load_config(path)


def _limit_memory() -> None:  # the old loader took 9.3 GB: never let a regression take the machine
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def test_agent_cli_with_an_alias_bomb_config_exits_2_with_one_short_line(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text(alias_bomb())
    done = subprocess.run(
        [sys.executable, "-m", "runtimekit.cli", "serve", "--config", str(path)],
        capture_output=True, text=True, timeout=60, preexec_fn=_limit_memory,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and len(lines[0]) < 400, done.stderr[-2000:]
    assert lines[0].startswith("runtimekit: error: --config: ") and "aliases expand to more than" in lines[0]


async def test_sim_control_answers_deeply_nested_json_with_400_naming_the_rule():
    node = SimulatedNode(load_scenario("dgx-h100"), seed=7)
    app = web.Application()
    add_control_routes(app, node)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        for nested in ("[" * 100_000 + "]" * 100_000, '{"a":' * 70 + "0" + "}" * 70):
            r = await client.post("/sim/v1/faults", data=nested, headers={"Content-Type": "application/json"})
            assert r.status == 400
            assert (await r.json())["error"] == "body: nested deeper than 64 levels"
    assert node.active_faults() == []


# -- hostile scalars: numbers past int/str conversion, lone surrogates, duplicate keys -------------

MAX_DIGITS = sys.get_int_max_str_digits()


def json_refused(text: str | bytes) -> str:
    with pytest.raises(DocumentError) as caught:
        load_json(text, what="body")
    message = str(caught.value)
    assert message.startswith("body: ") and len(message) <= MAX_MESSAGE
    return message


def test_a_number_past_the_int_conversion_limit_is_a_document_error_naming_where():
    nines = "9" * (MAX_DIGITS + 700)
    rule = f"a number of more than {MAX_DIGITS} digits"
    assert json_refused('{"alerts": [{"x": ' + nines + "}]}") == f"body: alerts[0].x: {rule}"
    assert json_refused("-" + nines) == f"body: {rule}"
    assert refused(f"max_body_bytes: {nines}\n") == f"cfg.yaml: {rule} (line 1, column 17)"
    assert refused(f"a:\n  - -{nines}\n") == f"cfg.yaml: {rule} (line 2, column 5)"
    # hex, octal-free binary and sexagesimal ints pass Python's conversion: the same bound applies
    assert refused(f"a: 0x{'f' * 5000}\n") == f"cfg.yaml: {rule} (line 1, column 4)"
    assert refused(f"a: 0b{'1' * 20000}\n") == f"cfg.yaml: {rule} (line 1, column 4)"
    assert refused("a: 1" + ":59" * 3000 + "\n") == f"cfg.yaml: {rule} (line 1, column 4)"
    assert load_json("9" * MAX_DIGITS, what="body") == int("9" * MAX_DIGITS)  # the limit itself is fine
    assert load_yaml(f"a: 0x{'f' * 100}\n", what="d") == {"a": 16 ** 100 - 1}


def test_other_scalars_yaml_cannot_construct_are_document_errors():
    assert refused("a: 2001-02-30\n") == "cfg.yaml: not a valid timestamp: day is out of range for month (line 1, column 4)"
    assert "not a valid float" in refused("a: !!float fast\n")


def test_a_lone_surrogate_is_not_valid_unicode():
    rule = "not valid Unicode: a lone surrogate U+D800"
    assert json_refused('{"alerts": [{"labels": {"node": "\\ud800"}}]}') == f"body: alerts[0].labels.node: {rule}"
    assert json_refused('{"a\\udc00b": 1}') == "body: not valid Unicode: a lone surrogate U+DC00 (in a key)"
    assert json_refused('[0, {"a": {"\\udc00": 1}}]') == "body: [1].a: not valid Unicode: a lone surrogate U+DC00 (in a key)"
    assert refused('a: "x\\ud800"\n') == f"cfg.yaml: {rule} (line 1, column 4)"
    assert load_json('["\\ud83d\\ude00"]', what="body") == ["\U0001f600"]  # a surrogate pair is one character


def test_a_duplicate_key_is_refused_naming_it():
    assert refused("dry_run: true\nlisten: x\ndry_run: false\n") == "cfg.yaml: duplicate key 'dry_run' (line 3, column 1)"
    assert "duplicate key 'max_nodes' (line 3, column 3)" in refused("breaker:\n  max_nodes: 1\n  max_nodes: 2\n")
    assert "duplicate key 1" in refused("{1: a, 0x1: b}\n")  # the same value written twice
    assert json_refused('{"a": {"b": 1, "b": 2}}') == "body: a: duplicate key 'b'"
    assert json_refused('{"a": 1, "a": 1}') == "body: duplicate key 'a'"
    # YAML's merge keys are not duplicates: the mapping's own keys override the merged ones
    assert load_yaml("a: &a {b: 1, c: 2}\nd: {<<: *a, b: 3}\n", what="d")["d"] == {"b": 3, "c": 2}
    assert load_yaml("a: &a {b: 1}\ne: &e {b: 2}\nd: {<<: [*a, *e]}\n", what="d")["d"] == {"b": 1}


def test_config_file_with_a_duplicate_or_a_huge_number_is_a_config_error(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text("log_level: debug\nlog_level: info\n")
    with pytest.raises(ConfigError, match=f"^--config: {path}: duplicate key 'log_level' \\(line 2, column 1\\)$"):
        load_config(path)
    path.write_text("listen_port: " + "9" * 5000 + "\n")
    with pytest.raises(ConfigError, match=f"--config: {path}: a number of more than {MAX_DIGITS} digits"):
        load_config(path)


def test_remediation_cli_with_a_huge_number_in_its_config_exits_2_naming_the_rule(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("max_body_bytes: " + "9" * 5000 + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "runtimekit.cli", "remediate", "serve", "--config", str(path)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and f"a number of more than {MAX_DIGITS} digits (line 1, column 17)" in lines[0], done.stderr[-2000:]


async def test_sim_control_answers_hostile_json_with_400_naming_the_rule():
    node = SimulatedNode(load_scenario("dgx-h100"), seed=7)
    app = web.Application()
    add_control_routes(app, node)
    cases = {
        '{"fault": "' + "\\ud800" + '"}': "body: fault: not valid Unicode: a lone surrogate U+D800",
        '{"gpu": ' + "9" * 5000 + "}": f"body: gpu: a number of more than {MAX_DIGITS} digits",
        '{"gpu": 0, "gpu": 1}': "body: duplicate key 'gpu'",
    }
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        for body, error in cases.items():
            r = await client.post("/sim/v1/faults", data=body, headers={"Content-Type": "application/json"})
            assert r.status == 400
            assert (await r.json())["error"] == error
    assert node.active_faults() == []
