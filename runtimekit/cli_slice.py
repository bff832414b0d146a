"""``runtimekit slice create|list|get|delete``, ``runtimekit device mode`` and ``runtimekit node``:
the command line's client of runtimekit.v1 over the agent's unix socket (synchronous gRPC).

The socket: ``--socket PATH``; else the one the agent's configuration names (``--config FILE``,
``--state-dir DIR`` as ``runtimekit serve`` takes them: ``api.socket``, or ``STATE_DIR/runtimekit.sock``);
else the default, /var/lib/runtimekit/runtimekit.sock. Output: a table, or with ``-o json`` the
answer in proto3's JSON mapping (field names as in the .proto; 64-bit numbers as strings).

Exit codes, as ``runtimekit.cli``'s: 0 done; 2 bad usage or a request the agent refused as invalid
(INVALID_ARGUMENT; the message names the field and the rule); 1 any other refusal or failure (not
found, no room, a conflict, the agent unreachable — one line that says so, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import stat
import sys
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]

from runtimekit import config as config_module
from runtimekit._proto.runtimekit.v1 import node_pb2, service_pb2, service_pb2_grpc, slice_pb2
from runtimekit.cli_args import EXIT_FAILURE, EXIT_USAGE, seconds
from runtimekit.grpc_unix import socket_path_problem

GiB = 1 << 30
CONNECT_SECONDS = 5.0  # the longest wait for the agent to accept the connection (--timeout, if shorter)
MiB = 1 << 20
HEALTH_NAMES = {value: name.removeprefix("HEALTH_STATE_").lower() for name, value in node_pb2.HealthState.items()}
STATE_NAMES = {value: name.removeprefix("SLICE_STATE_").lower() for name, value in slice_pb2.SliceState.items()}


class CliError(Exception):
    """A failure to report in one line; ``code`` is the exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


# -- parsers ---------------------------------------------------------------------------------------


def _int32(text: str) -> int:
    """An integer the request can carry (int32); the agent checks its own range and names the field."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not -(2**31) <= value < 2**31:
        raise argparse.ArgumentTypeError(f"must be an integer from {-(2**31)} to {2**31 - 1}, got {text}")
    return value


def _uint32(text: str) -> int:
    """An integer the request can carry (uint32): placement starts; the agent names the allowed ones."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to {2**32 - 1}, got {text}")
    return value


def _path(text: str) -> str:
    """A file or socket path: not empty (an empty one would silently mean the default)."""
    if not text:
        raise argparse.ArgumentTypeError("must name a path, got ''")
    return text


def client_options() -> argparse.ArgumentParser:
    """The options every client of the agent's API shares (socket, config, state dir, output, timeout)."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--socket", type=_path, metavar="PATH", help="the agent's API socket (default: from --config/--state-dir, "
                         "else /var/lib/runtimekit/runtimekit.sock)")
    options.add_argument("--config", type=_path, metavar="FILE", help="the agent's configuration file (its api.socket, state_dir)")
    options.add_argument("--state-dir", type=_path, metavar="DIR", help="the agent's state directory (its socket is DIR/runtimekit.sock)")
    options.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format (default table)")
    options.add_argument("--timeout", type=seconds, default=30.0, metavar="SECONDS",
                         help="give up after this long (default 30, at most 86400)")
    return options


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """Register ``slice``, ``device`` and ``node`` on the root parser's subcommands."""
    options = client_options()
    slices = commands.add_parser("slice", help="make, list, read and delete slices (runtimekit.v1 over the agent's socket)")
    actions = slices.add_subparsers(dest="slice_command", required=True, metavar="ACTION")
    create = actions.add_parser("create", parents=[options], help="make a slice")
    create.add_argument("--mode", required=True, help="tdm (a time-shared share) or mig (a hardware partition)")
    create.add_argument("--compute", type=_int32, default=0, metavar="N",
                        help="percent of one card, 1-100 (default 0: unlimited; with --profile, what the profile gives)")
    create.add_argument("--memory", default="", metavar="SIZE", help="NGiB or NMiB, a multiple of 128 MiB (2GiB, 512MiB); "
                        "required unless --profile is given (then default: what the profile gives)")
    create.add_argument("--device", default="", metavar="D", help="a GPU index or UUID (default: any; --profile needs one)")
    create.add_argument("--profile", default="", metavar="NAME",
                        help="mode mig: the MIG profile to make, by name as `runtimekit node -o json` lists it in "
                        "partition_profiles (1g.10gb); needs --device (default: the smallest that holds compute and memory)")
    create.add_argument("--placement", type=_uint32, default=None, metavar="START",
                        help="with --profile: the memory slice the partition starts at, one of the profile's "
                        "placements (default: the agent chooses); refused when a partition holds it")
    create.add_argument("--pod-uid", default="", metavar="U", help="the owning pod's UID (with --container)")
    create.add_argument("--container", default="", metavar="C", help="the owning container's name")
    create.add_argument("--owner", default="", metavar="ID", help="a free owner id (instead of --pod-uid/--container)")
    create.add_argument("--priority", type=_int32, default=0, metavar="P", help="higher is more important (default 0)")
    create.set_defaults(handler=guarded(_run_create))
    actions.add_parser("list", parents=[options], help="every slice").set_defaults(handler=guarded(_run_list))
    for name, handler, what in (("get", _run_get, "read a slice"), ("delete", _run_delete, "delete a slice")):
        action = actions.add_parser(name, parents=[options], help=what)
        action.add_argument("slice_id", metavar="ID")
        action.set_defaults(handler=guarded(handler))

    device = commands.add_parser("device", help="a card's slicing mode (runtimekit.v1)")
    device_actions = device.add_subparsers(dest="device_command", required=True, metavar="ACTION")
    mode = device_actions.add_parser("mode", parents=[options], help="set a card's mode: tdm or mig (refused while it has slices)")
    mode.add_argument("device", metavar="DEVICE", help="a GPU index or UUID")
    mode.add_argument("mode", choices=("tdm", "mig"))
    mode.set_defaults(handler=guarded(_run_mode))

    commands.add_parser("node", parents=[options], help="the node's devices: modes, capacity, health (runtimekit.v1)"
                        ).set_defaults(handler=guarded(_run_node))


# -- calls -----------------------------------------------------------------------------------------

def socket_path(args: argparse.Namespace) -> str:
    """The socket: --socket, else the configuration's (--config, --state-dir), else the default."""
    if args.socket:
        return str(args.socket)
    overrides = {"state_dir": args.state_dir} if args.state_dir else {}
    return config_module.load(args.config, overrides).api_socket


def _reachable(path: str) -> None:
    where = f"cannot reach the agent at unix:{path}"
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise CliError(f"{where}: no socket there (is `runtimekit serve` running? --socket PATH names another)") from None
    except OSError as error:
        raise CliError(f"{where}: {error.strerror or error}") from None
    if not stat.S_ISSOCK(mode):
        raise CliError(f"{where}: the path is not a socket")
    if not os.access(path, os.R_OK | os.W_OK):
        raise CliError(f"{where}: permission denied (the socket is mode 0600: run as the agent's user)")
    too_long = socket_path_problem(path)
    if too_long is not None:
        raise CliError(f"{where}: {too_long} (name it by a shorter one, through a symbolic link to its directory)")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        raise CliError(f"{where}: nothing listens on the socket (left by an agent that stopped?)") from None
    except OSError:
        pass  # anything else: gRPC's own connection says what it is
    finally:
        probe.close()


def call(args: argparse.Namespace, method: str, request: Any) -> Any:
    """``AgentService.<method>(request)`` on the agent's socket; CliError on any failure."""
    path = socket_path(args)
    _reachable(path)
    with grpc.insecure_channel(f"unix:{path}") as channel:
        waited = min(args.timeout, CONNECT_SECONDS)
        try:
            grpc.channel_ready_future(channel).result(timeout=waited)
        except grpc.FutureTimeoutError:
            raise CliError(f"cannot reach the agent at unix:{path}: nothing answers on the socket "
                           f"(waited {waited:g} s)") from None
        stub = service_pb2_grpc.AgentServiceStub(channel)
        try:
            return getattr(stub, method)(request, timeout=args.timeout)
        except grpc.RpcError as error:
            code: grpc.StatusCode = error.code()
            exit_code = EXIT_USAGE if code == grpc.StatusCode.INVALID_ARGUMENT else EXIT_FAILURE
            raise CliError(f"{code.name}: {error.details()}", exit_code) from None


# -- output ----------------------------------------------------------------------------------------

def _size(size: int) -> str:
    return f"{size // GiB}GiB" if size and size % GiB == 0 else f"{size // MiB}MiB"


def _owner(owner: slice_pb2.Owner) -> str:
    return f"{owner.pod_uid}/{owner.container}" if owner.pod_uid else owner.owner_id or "-"


def _slice_row(item: slice_pb2.Slice) -> list[str]:
    return [item.id, item.mode, str(item.device.index), f"{item.compute_percent}%" if item.compute_percent else "unlimited",
            _size(item.memory_bytes), item.profile or "-", STATE_NAMES.get(item.state, "?"), _owner(item.owner),
            item.cdi_device or item.partition.uuid or "-"]


SLICE_COLUMNS = ["ID", "MODE", "GPU", "COMPUTE", "MEMORY", "PROFILE", "STATE", "OWNER", "DEVICE NAME"]
DEVICE_COLUMNS = ["GPU", "UUID", "MODEL", "MEMORY", "MODE", "PENDING", "COMPUTE FREE", "MEMORY FREE", "SLICES", "HEALTH"]


def _device_row(device: node_pb2.Device) -> list[str]:
    capacity = device.capacity if device.HasField("capacity") else None
    health = HEALTH_NAMES.get(device.health.state, "?") if device.HasField("health") else "unknown"
    return [str(device.ref.index), device.ref.uuid, device.model or "-", _size(device.memory_bytes), device.mode or "-",
            device.pending_mode or "-", f"{capacity.compute_percent_free}%" if capacity else "-",
            _size(capacity.memory_bytes_free) if capacity else "-", str(len(device.slice_ids)),
            health + (" (lost)" if device.lost else "")]


def table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns, two spaces apart, a header line first."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(columns, *rows, strict=False)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in [columns, *rows]]
    return "\n".join(lines)


def print_result(args: argparse.Namespace, message: Any, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    """Print an answer: ``-o json`` in proto3's JSON mapping, else ``rows`` as a table under ``columns``; 0."""
    if args.output == "json":
        print(json.dumps(MessageToDict(message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True),
                         indent=2, sort_keys=True))
    else:
        print(table(columns, rows))
    return 0


# -- handlers --------------------------------------------------------------------------------------

def _run_create(args: argparse.Namespace) -> int:
    request = service_pb2.CreateSliceRequest(
        mode=args.mode, compute=args.compute, memory=args.memory, device=args.device, pod_uid=args.pod_uid,
        container=args.container, owner_id=args.owner, priority=args.priority, profile=args.profile,
        placement_start=args.placement,  # None leaves the optional field absent
    )
    made = call(args, "CreateSlice", request).slice
    return print_result(args, made, SLICE_COLUMNS, [_slice_row(made)])


def _run_list(args: argparse.Namespace) -> int:
    answer = call(args, "ListSlices", service_pb2.ListSlicesRequest())
    return print_result(args, answer, SLICE_COLUMNS, [_slice_row(item) for item in answer.slices])


def _run_get(args: argparse.Namespace) -> int:
    found = call(args, "GetSlice", service_pb2.GetSliceRequest(slice_id=args.slice_id)).slice
    return print_result(args, found, SLICE_COLUMNS, [_slice_row(found)])


def _run_delete(args: argparse.Namespace) -> int:
    gone = call(args, "DeleteSlice", service_pb2.DeleteSliceRequest(slice_id=args.slice_id)).slice
    return print_result(args, gone, SLICE_COLUMNS, [_slice_row(gone)])


def _run_mode(args: argparse.Namespace) -> int:
    device = call(args, "SetDeviceMode", service_pb2.SetDeviceModeRequest(device=args.device, mode=args.mode)).device
    return print_result(args, device, DEVICE_COLUMNS, [_device_row(device)])


def _run_node(args: argparse.Namespace) -> int:
    node = call(args, "GetNode", service_pb2.GetNodeRequest()).node
    return print_result(args, node, DEVICE_COLUMNS, [_device_row(device) for device in node.devices])


def guarded(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``handler`` with its failures as one line on stderr and an exit code, never a traceback."""
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except CliError as error:
            print(f"runtimekit: error: {error}", file=sys.stderr)
            return error.code
        except ValueError as error:  # a bad --config file
            print(f"runtimekit: error: {error}", file=sys.stderr)
            return EXIT_USAGE

    return run
