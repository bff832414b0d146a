"""`runtimekit gang plan` on the shipped example and on broken input: what it prints (JSON and
table), its exit codes (0 all placed, 1 some refused, 2 bad input), never a traceback. The parser
is built here the way `runtimekit gang` registers it (plan_cli.add_plan_parser on the gang
subcommands)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from runtimekit.kube.gang.plan_cli import add_plan_parser

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "gang"


def plan(*argv: str) -> int:
    root = argparse.ArgumentParser(prog="runtimekit")
    gang = root.add_subparsers(dest="command", required=True).add_parser("gang")
    add_plan_parser(gang.add_subparsers(dest="gang_command", required=True))
    args = root.parse_args(["gang", "plan", *argv])
    return int(args.handler(args))


def test_the_example_places_four_gangs_and_says_why_not_the_fifth(capsys: pytest.CaptureFixture[str]) -> None:
    code = plan("--cluster", str(EXAMPLE / "cluster.yaml"), "--gangs", str(EXAMPLE / "gangs.yaml"), "-o", "json")
    assert code == 1  # one gang refused
    out = json.loads(capsys.readouterr().out)
    assert (out["placed"], out["refused"]) == (4, 1)
    gangs = {gang["key"]: gang for gang in out["gangs"]}
    llama = gangs["team-a/llama-70b"]
    assert llama["placed"] and llama["tiers_spanned"] == llama["lower_bound"] == 1 and llama["tiers_spanned_name"] == "leaf"
    workers = {llama["nodes"][f"worker-{i}"] for i in range(4)}
    assert len(workers) == 4 and llama["nodes"]["launcher"] in workers
    assert llama["domain"].startswith("leaf c0/")
    finetune = gangs["team-b/finetune"]
    assert len(set(finetune["nodes"].values())) == 2  # two 4-GPU pods a node
    assert not set(finetune["nodes"].values()) & workers  # reserved nodes are not given twice
    assert gangs["team-c/eval"]["tiers_spanned"] == 0
    refused = gangs["team-d/pretrain"]
    assert not refused["placed"] and "not enough free capacity now" in refused["reason"] and "lower bound: core" in refused["reason"]
    used = [node for gang in out["gangs"] if gang["placed"] for node in gang["nodes"].values()]
    assert "dgx-006" not in used  # NotReady


def test_the_table_has_one_row_per_gang(capsys: pytest.CaptureFixture[str]) -> None:
    plan("--cluster", str(EXAMPLE / "cluster.yaml"), "--gangs", str(EXAMPLE / "gangs.yaml"))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["GANG", "PODS", "NODES"]
    assert [line.split()[0] for line in lines[1:]] == ["team-a/llama-70b", "team-b/finetune", "team-c/eval", "team-d/pretrain",
                                                       "team-e/sweep"]
    assert "refused" in lines[4]


def test_every_gang_placed_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gangs = tmp_path / "gangs.yaml"
    gangs.write_text("gangs: [{key: ns/small, pods: [{name: w, replicas: 2, gpus: 8}]}]\n")
    assert plan("--cluster", str(EXAMPLE / "cluster.yaml"), "--gangs", str(gangs), "-o", "json") == 0
    assert json.loads(capsys.readouterr().out)["gangs"][0]["tiers_spanned"] == 1


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("gangs.yaml", "gangs: [{key: a, pods: [{name: w}]}]\n", "gangs[0].pods[0].gpus: required key is missing"),
    ("gangs.json", "{", "not valid JSON"),
])
def test_bad_input_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str,
                                         expected: str) -> None:
    gangs = tmp_path / name
    gangs.write_text(text)
    assert plan("--cluster", str(EXAMPLE / "cluster.yaml"), "--gangs", str(gangs)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("runtimekit: error: ") and str(gangs) in err and expected in err


def test_a_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert plan("--cluster", str(tmp_path / "none.yaml"), "--gangs", str(EXAMPLE / "gangs.yaml")) == 2
    assert "cannot read" in capsys.readouterr().err
