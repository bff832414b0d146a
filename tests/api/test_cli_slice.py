"""`runtimekit slice|device|node` against the API served on a real unix socket (the command line
runs in a thread: it is a synchronous gRPC client and the server lives on the test's event loop)."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest
from api_fakes import uuid_for
from api_harness import Api

from runtimekit.cli import main


async def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def lines(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


async def test_create_prints_the_slice_as_a_table(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = await run(capsys, "slice", "create", "--socket", api.server.socket_path, "--mode", "tdm",
                               "--compute", "50", "--memory", "2GiB", "--owner", "me")
    assert (code, err) == (0, "")
    header, row = lines(out)
    assert header[:8] == ["ID", "MODE", "GPU", "COMPUTE", "MEMORY", "PROFILE", "STATE", "OWNER"]
    assert row[1:] == ["tdm", "0", "50%", "2GiB", "-", "ready", "me", f"runtimekit.io/slice={row[0]}"]
    assert api.slicer.calls[-1][1].owner_id == "me"


async def test_list_and_get_as_json(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = await run(capsys, "slice", "create", "--state-dir", str(Path(api.server.socket_path).parent), "--mode", "mig",
                             "--compute", "30", "--memory", "20GiB", "--pod-uid", "u1", "--container", "main", "-o", "json")
    assert code == 0
    created = json.loads(out)
    code, out, _ = await run(capsys, "slice", "list", "--socket", api.server.socket_path, "-o", "json")
    assert code == 0
    listed = json.loads(out)["slices"]
    assert listed == [created]
    assert created["partition"]["uuid"].startswith("MIG-") and created["profile"] == "3g.40gb"
    assert created["requested_memory_bytes"] == str(20 << 30)  # proto3 JSON: 64-bit integers as strings
    assert created["owner"] == {"pod_uid": "u1", "container": "main", "owner_id": ""}
    code, out, _ = await run(capsys, "slice", "get", created["id"], "--socket", api.server.socket_path, "-o", "json")
    assert (code, json.loads(out)) == (0, created)


async def test_a_refused_request_prints_the_agents_message_naming_the_field(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = await run(capsys, "slice", "create", "--socket", api.server.socket_path, "--mode", "tdm",
                               "--memory", "2 gigs")
    assert (code, out) == (2, "")
    assert err == "runtimekit: error: INVALID_ARGUMENT: memory: must be NGiB or NMiB, got '2 gigs'\n"


async def test_delete_of_an_unknown_slice_exits_1_with_one_line(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = await run(capsys, "slice", "delete", "s-0000000000ff", "--socket", api.server.socket_path)
    assert (code, out) == (1, "")
    assert err == "runtimekit: error: NOT_FOUND: slice_id: no slice 's-0000000000ff'\n"


async def test_device_mode_and_node_tables(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = await run(capsys, "device", "mode", "0", "mig", "--socket", api.server.socket_path)
    assert code == 0
    header, row = lines(out)
    assert header[:2] == ["GPU", "UUID"] and row[:2] == ["0", uuid_for(0)]
    code, out, _ = await run(capsys, "node", "--socket", api.server.socket_path)
    assert code == 0
    rows = out.strip().splitlines()
    assert len(rows) == 3 and "NVIDIA H100 80GB HBM3" in rows[1]
    assert rows[1].split()[-1] == "healthy" and rows[2].split()[-1] == "unhealthy"


async def test_without_a_slicer_the_setting_is_named(api_without_slicer: Api, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = await run(capsys, "slice", "list", "--socket", api_without_slicer.server.socket_path)
    assert code == 1
    assert err.startswith("runtimekit: error: UNAVAILABLE: slicer.enabled is false on this node")
    assert len(err.splitlines()) == 1


async def test_an_absent_agent_is_one_line(short_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = await run(capsys, "slice", "list", "--state-dir", str(short_dir))
    assert (code, out) == (1, "")
    assert err == (f"runtimekit: error: cannot reach the agent at unix:{short_dir}/runtimekit.sock: no socket there "
                   "(is `runtimekit serve` running? --socket PATH names another)\n")


async def test_a_socket_nobody_serves_is_one_line(short_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = short_dir / "runtimekit.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))  # bound, never listening: what a killed agent leaves
    stale.close()
    started = asyncio.get_running_loop().time()
    code, out, err = await run(capsys, "node", "--socket", str(path))
    assert (code, out) == (1, "")
    assert err == f"runtimekit: error: cannot reach the agent at unix:{path}: nothing listens on the socket (left by an agent that stopped?)\n"
    assert asyncio.get_running_loop().time() - started < 4.0  # said at once, not after the 5 s wait for a connection


async def test_a_socket_that_never_speaks_grpc_is_said_with_the_wait(short_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = short_dir / "runtimekit.sock"
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(str(path))
        listener.listen()  # connections wait in the backlog, never accepted: no gRPC answer
        code, out, err = await run(capsys, "node", "--socket", str(path), "--timeout", "0.3")
    finally:
        listener.close()
    assert (code, out) == (1, "")
    assert err == f"runtimekit: error: cannot reach the agent at unix:{path}: nothing answers on the socket (waited 0.3 s)\n"


async def test_a_socket_path_too_long_to_reach_is_named(short_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = short_dir / ("d" * 100)
    deep.mkdir()
    link = short_dir / "l"
    link.symlink_to(deep)
    path = deep / "runtimekit.sock"
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(str(link / "runtimekit.sock"))  # bound through a short name: the long one names the same socket
        listener.listen()
        code, out, err = await run(capsys, "node", "--socket", str(path))
    finally:
        listener.close()
    assert (code, out) == (1, "")
    assert err == (f"runtimekit: error: cannot reach the agent at unix:{path}: the path is {len(str(path))} bytes, a unix "
                   "socket path at most 107 (name it by a shorter one, through a symbolic link to its directory)\n")


@pytest.mark.parametrize("flag,value,rule", [
    ("--compute", "99999999999", "must be an integer from -2147483648 to 2147483647"),
    ("--priority", "ten", "must be an integer"),
    ("--timeout", "-1", "must be a number of seconds above 0 and at most 86400"),
    ("--timeout", "nan", "must be a number of seconds above 0 and at most 86400"),
    ("--timeout", "1e10", "must be a number of seconds above 0 and at most 86400"),
    ("--socket", "", "must name a path"),
    ("--state-dir", "", "must name a path"),
    ("--placement", "-1", "must be an integer from 0 to 4294967295"),
    ("--placement", "4294967296", "must be an integer from 0 to 4294967295"),
    ("--placement", "two", "must be an integer"),
])
def test_flags_out_of_what_a_request_can_carry_are_refused_by_name(
    short_dir: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, rule: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["slice", "create", "--mode", "tdm", "--memory", "1GiB", "--owner", "me", flag, value,
              "--socket", str(short_dir / "absent.sock")])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"argument {flag}: {rule}" in err and "Traceback" not in err


@pytest.mark.parametrize(("extra", "start"), [(["--placement", "6"], 6), (["--placement", "0"], 0), ([], None)])
async def test_create_with_a_profile_sends_it_and_the_placement_without_memory(
    api: Api, capsys: pytest.CaptureFixture[str], extra: list[str], start: int | None
) -> None:
    code, _, err = await run(capsys, "slice", "create", "--socket", api.server.socket_path, "--mode", "mig", "--device", "1",
                             "--profile", "1g.10gb", "--owner", "me", *extra)
    sent = api.slicer.calls[-1][1]
    assert (sent.profile, sent.placement_start, sent.memory, sent.compute, sent.device) == ("1g.10gb", start, "", 0, "1")
    assert code == 2 and err.startswith("runtimekit: error: INVALID_ARGUMENT: memory:")  # the fake slicer wants memory


def test_create_help_documents_profile_and_placement(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["slice", "create", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--profile NAME mode mig: the MIG profile to make" in text
    assert "--placement START with --profile: the memory slice the partition starts at" in text
    assert "required unless --profile is given" in text
