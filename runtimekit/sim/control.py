"""HTTP control API of the simulated node (JSON; loopback peers naming the node in Host only).

    GET    /sim/v1/faults      -> {"faults": [...], "kinds": {kind: {description, params}}}
    POST   /sim/v1/faults      {"gpu": 0, "fault": "xid", "params"?: {"xid": 79}} -> {"fault": {...}}
    DELETE /sim/v1/faults      {"gpu": 0, "fault": "xid" | null} -> {"cleared": n}
    GET    /sim/v1/processes   -> {"processes": [...]}
    POST   /sim/v1/processes   {"gpu": 0, "used_memory_bytes": N, "name"?: str, "pid"?: int,
                               "gpu_instance"?: int, "compute_instance"?: int} -> {"pid": pid}
                               (on a GPU in MIG mode both instance ids are required: the process
                               runs in that MIG device) or {"count": N} (background churn) -> {"count": N}
    DELETE /sim/v1/processes   {"pid": pid} -> {"removed": pid}
    GET    /sim/v1/pods        -> {"pods": [...]}
    POST   /sim/v1/pods        {"namespace", "name", "qos"?, "containers": [{"name", "gpus"?, "idle"?}]}
                               -> {"pod": {...}}; or {"count": N} (generated pods) -> {"count": N}
    DELETE /sim/v1/pods        {"namespace", "name"} -> {"deleted": "namespace/name"}
    POST   /sim/v1/pods/phase  {"namespace", "name", "phase": "Succeeded" | "Failed"} -> {"pod": {...}}:
                               the pod's containers exit for good (its processes end, the fake runtime
                               lists them exited and its sandbox not ready until the pod is deleted);
                               400 naming phase for another phase or a pod already finished, 404 for
                               an unknown pod
    POST   /sim/v1/sources     {"source": "kubelet" | "cri", "running": bool} -> {"source", "running"}
    POST   /sim/v1/reboot      (no body, or {}) -> {"boot_id": str | null, "cleared": n}: simulate a node
                               reboot (faults cleared, driver counters restarted, processes gone,
                               a new boot id; boot_id is null without a simulated host)
    POST   /sim/v1/reset       {"gpu": 0} -> {"gpu": 0, "cleared": n, "mig": {"current", "pending"} | null}:
                               a GPU reset (nvidia-smi -r): the pending MIG mode takes effect, MIG
                               instances and the GPU's faults are gone; refused (400) while any
                               process runs on the GPU, as the driver refuses it, and on a GPU off
                               the bus (gpu-lost, XID 79: only a reboot brings it back)
    POST   /sim/v1/mig/xid     {"gpu": 0, "xid": 43, "gpu_instance": 1, "compute_instance"?: 0}
                               -> {"delivered": n}: an XID raised in a MIG instance (its event
                               carries the instance ids; n = event sets that got it)
    GET    /sim/v1/host        -> {"thread_id": N | null, "thread_name", "root", "kubelet_socket",
                               "cri_socket", "proc_root", "boot_id_path", "sources": {"kubelet":
                               bool, "cri": bool}}: the simulated host side (fake kubelet, CRI,
                               /proc); thread_id is the native id of the thread it runs in
                               (/proc/<agent pid>/task/<thread_id>), null when it shares the
                               caller's; 404 without a simulated host

A peer outside 127.0.0.0/8 and ::1 gets 403. A POST or DELETE must say ``Content-Type:
application/json`` (with or without a body), or it gets 415 naming the header: a web page open in
a browser on the node can send a "simple" cross-site request (text/plain, a form, or no body at
all: ``fetch(url, {method: "POST", mode: "no-cors"})``) without a CORS preflight, but not one
declared JSON. A page can still be *same-origin* with the agent by DNS rebinding (its own name,
``attacker.example``, made to resolve to 127.0.0.1): its JSON requests then need no preflight and
come from a loopback peer, but its ``Host`` header names the attacker's domain. So every request
must also name the node in ``Host`` (``localhost``, a loopback address, or the agent's own listen
host), or it gets 403; with both rules no page can inject faults or reboot the simulated node.

Bad input gets 400 with {"error": "<field>: <rule>"} and changes nothing: an unknown top-level
key too (a misspelt ``"fault"`` would otherwise clear every fault), and ``params`` that is not an
object.

Handlers only touch in-memory node state (no NVML, no I/O), so they run on the event loop; what
touches the simulated host (its servers, /proc, the boot id: ``sources``, ``reboot``) runs on the
host's own thread when it has one, awaited here.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Collection
from dataclasses import asdict
from typing import Any, Literal, overload

from aiohttp import web

from runtimekit.documents import DocumentError, load_json
from runtimekit.json_requests import not_declared_json
from runtimekit.service import CONFIG

from .faults import FAULT_KINDS, FaultError
from .host import SimulatedHost
from .node import SimulatedNode

__all__ = ["add_control_routes", "fault_kinds_json", "is_loopback"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: The fields of POST /sim/v1/processes (the other form is {"count": N} alone).
_PROCESS_FIELDS = ("gpu", "used_memory_bytes", "name", "pid", "namespace", "pod", "container", "gpu_instance",
                   "compute_instance")


def is_loopback(remote: str | None) -> bool:
    """True for 127.0.0.0/8 and ::1 (and IPv4-mapped loopback)."""
    if not remote:
        return False
    try:
        addr = ipaddress.ip_address(remote.split("%")[0])
    except ValueError:
        return False
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


#: A Host header: a bracketed IPv6 address or a name / IPv4 address, then an optional port.
_HOST_HEADER = re.compile(r"(?:\[(?P<ipv6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9._-]+))(?::[0-9]{1,5})?")


def _same_host(a: str, b: str) -> bool:
    """``a`` and ``b`` (lower case) name the same host: equal names, or equal addresses however written."""
    try:
        return ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return a == b


@functools.cache
def _own_names() -> frozenset[str]:
    """This machine's own names (``hostname``, its fully qualified form), lower case: Debian maps
    the host name to 127.0.1.1, so ``--agent http://$(hostname):9445`` reaches the agent."""
    return frozenset(name.lower() for name in (socket.gethostname(), socket.getfqdn()) if name)


def _unspecified(host: str) -> bool:
    """0.0.0.0 or ::, which a client cannot name as a Host."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def _host_names_the_node(header: str | None, listen_host: str | None) -> bool:
    """True when the Host ``header`` names this node: ``localhost`` (with or without its final
    dot), a loopback address, the machine's own host name, or ``listen_host`` (the agent's own;
    None: none). A rebound DNS name never does, and neither does a malformed header or none at
    all (a browser always sends one). The peer is loopback besides (``_guarded``)."""
    match = _HOST_HEADER.fullmatch((header or "").lower())
    if match is None:
        return False
    host = match["ipv6"] or match["name"]
    name = host.removesuffix(".") if match["name"] else host
    return (name == "localhost" or is_loopback(host) or name in _own_names()
            or (listen_host is not None and _same_host(host, listen_host.lower())))


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})  # methods a cross-site page could send


def _content_type_error(request: web.Request) -> str | None:
    """Why ``request`` may not change anything (None: it may): every request that changes state,
    with a body or without, must be declared JSON (``runtimekit.json_requests``)."""
    return not_declared_json(request) if request.method in _CHANGING else None


def _guarded(fn: Callable[[web.Request], Awaitable[Any]]) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        if not is_loopback(request.remote):
            return _error(403, f"simulator control is only served to loopback peers, not {request.remote}")
        config = request.app.get(CONFIG)
        listen_host = config.listen_host if config is not None else None
        header = request.headers.get("Host")
        if not _host_names_the_node(header, listen_host):
            own = (listen_host is not None and listen_host.lower() != "localhost" and not is_loopback(listen_host)
                   and not _unspecified(listen_host))
            names = "localhost, a loopback address, this machine's host name" + (f" or {listen_host}" if own else "")
            shown = f"Host {header!r}" if header is not None else "no Host header"
            return _error(403, f"simulator control is only served to requests whose Host header names this node "
                               f"({names}), not {shown}: a guard against DNS rebinding")
        refused = _content_type_error(request)
        if refused is not None:
            return _error(415, refused)
        try:
            return web.json_response(await fn(request))
        except FaultError as exc:
            return _error(400, str(exc))
        except LookupError as exc:
            return _error(404, str(exc.args[0]) if exc.args else "not found")

    return handler


async def _body(request: web.Request, fields: Collection[str]) -> dict[str, Any]:
    """The request's JSON object ({} for no body), with no key outside ``fields`` (``_only``)."""
    raw = await request.read()
    if not raw:
        return {}
    try:
        body = load_json(raw, what="body")
    except DocumentError as exc:  # size, depth, encoding, syntax: a 400 naming the rule
        raise FaultError(str(exc)) from None
    if not isinstance(body, dict):
        raise FaultError("body: must be a JSON object")
    return _only(body, fields)


def _only(body: dict[str, Any], fields: Collection[str]) -> dict[str, Any]:
    """``body``, after refusing the first key (in sorted order) that is not one of ``fields``: a
    key the route does not read would otherwise be dropped unseen (a misspelt ``fault`` clears
    every fault, a misspelt ``params`` injects the defaults)."""
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise FaultError(f"{unknown[0]}: unknown field (fields: {', '.join(sorted(fields)) or 'none'})")
    return body


@overload
def _int(body: dict[str, Any], key: str, *, required: Literal[True] = True) -> int: ...
@overload
def _int(body: dict[str, Any], key: str, *, required: bool) -> int | None: ...
def _int(body: dict[str, Any], key: str, *, required: bool = True) -> int | None:
    v = body.get(key)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise FaultError(f"{key}: required, must be an integer (got {v!r})")
    return v


def fault_kinds_json() -> dict[str, Any]:
    """FAULT_KINDS as JSON: kind -> {description, params: [{name, type, default, allowed}]}."""
    return {
        k: {
            "description": s.description,
            "params": [
                {"name": p.name, "type": p.type.__name__, "default": p.default, "allowed": p.allowed(), "help": p.help}
                for p in s.params
            ],
        }
        for k, s in FAULT_KINDS.items()
    }


def _str(body: dict[str, Any], key: str) -> str:
    v = body.get(key)
    if not isinstance(v, str) or not v:
        raise FaultError(f"{key}: required, must be a non-empty string (got {v!r})")
    return v


def add_control_routes(app: web.Application, node: SimulatedNode, host: SimulatedHost | None = None) -> None:
    """Add the /sim/v1 routes for ``node`` (and its fake kubelet and runtime, ``host``) to ``app``."""

    async def get_faults(request: web.Request) -> Any:
        return {"faults": node.active_faults(), "kinds": fault_kinds_json()}

    async def post_fault(request: web.Request) -> Any:
        body = await _body(request, ("gpu", "fault", "params"))
        gpu = _int(body, "gpu")
        kind = body.get("fault")
        if not isinstance(kind, str):
            raise FaultError(f"fault: required, must be one of {', '.join(sorted(FAULT_KINDS))}")
        params = body.get("params", {})
        if not isinstance(params, dict):  # [], 0, false, null: not "no parameters"
            raise FaultError("params: must be an object")
        # gpu and kind are positional-only: a parameter named "gpu", "kind" or "self" is refused
        # by validate_params as any parameter the kind does not have.
        return {"fault": node.inject(gpu, kind, **params)}

    async def delete_fault(request: web.Request) -> Any:
        body = await _body(request, ("gpu", "fault"))
        gpu = _int(body, "gpu")
        kind = body.get("fault")
        if kind is not None and not isinstance(kind, str):
            raise FaultError("fault: must be a fault kind or null (all)")
        return {"cleared": node.clear(gpu, kind)}

    async def get_processes(request: web.Request) -> Any:
        return {"processes": node.processes()}

    async def post_process(request: web.Request) -> Any:
        body = await _body(request, (*_PROCESS_FIELDS, "count"))
        if "count" in body:
            count = _int(_only(body, ("count",)), "count")
            node.set_process_count(count)
            return {"count": count}
        gpu = _int(body, "gpu")
        size = _int(body, "used_memory_bytes")
        pid = _int(body, "pid", required=False)
        name = body.get("name", "python")
        owner = {key: body[key] for key in ("namespace", "pod", "container") if key in body}
        instance = {key: body[key] for key in ("gpu_instance", "compute_instance") if key in body}
        return {"pid": node.add_process(gpu, size, name=name, pid=pid, **owner, **instance)}

    async def delete_process(request: web.Request) -> Any:
        body = await _body(request, ("pid",))
        pid = _int(body, "pid")
        node.remove_process(pid)
        return {"removed": pid}

    async def get_pods(request: web.Request) -> Any:
        return {"pods": [asdict(pod) for pod in node.pods()]}

    async def post_pod(request: web.Request) -> Any:
        body = await _body(request, ("namespace", "name", "qos", "containers", "count"))
        if "count" in body:
            count = _int(_only(body, ("count",)), "count")
            node.set_pod_count(count)
            return {"count": count}
        pod = node.add_pod(_str(body, "namespace"), _str(body, "name"), body.get("containers"),
                           qos=body.get("qos", "burstable"))
        return {"pod": asdict(pod)}

    async def delete_pod(request: web.Request) -> Any:
        body = await _body(request, ("namespace", "name"))
        namespace, name = _str(body, "namespace"), _str(body, "name")
        node.delete_pod(namespace, name)
        return {"deleted": f"{namespace}/{name}"}

    async def post_pod_phase(request: web.Request) -> Any:
        body = await _body(request, ("namespace", "name", "phase"))
        namespace, name, phase = _str(body, "namespace"), _str(body, "name"), _str(body, "phase")
        return {"pod": asdict(node.finish_pod(namespace, name, phase))}

    async def post_source(request: web.Request) -> Any:
        body = await _body(request, ("source", "running"))
        source, running = body.get("source"), body.get("running")
        if source not in ("kubelet", "cri"):
            raise FaultError(f"source: must be kubelet or cri (got {source!r})")
        if not isinstance(running, bool):
            raise FaultError(f"running: must be true or false (got {running!r})")
        if host is None:
            raise LookupError("this simulated node has no fake kubelet or runtime")
        await host.set_running(source, running)
        return {"source": source, "running": running}

    async def post_reboot(request: web.Request) -> Any:
        await _body(request, ())  # a body, if any, must still be a JSON object, and empty
        if host is not None:
            return await host.call(host.reboot)
        return {"boot_id": None, "cleared": node.reboot()}

    async def post_reset(request: web.Request) -> Any:
        gpu = _int(await _body(request, ("gpu",)), "gpu")
        node.check_resettable(gpu)  # the GPU's range; off the bus, only a reboot helps, whatever runs there
        busy = node.processes_on(gpu)
        if busy:
            listed = ", ".join(f"{p['pid']} ({p['name']})" for p in busy)
            raise FaultError(f"gpu: GPU {gpu} is in use by {len(busy)} process(es): {listed}; "
                             "a GPU reset needs the GPU idle, as nvidia-smi -r does")
        cleared = node.reset_gpu(gpu)
        mig = None
        if node.mig_geometry(gpu) is not None:
            current, pending = node.mig_mode(gpu)
            mig = {"current": current, "pending": pending}
        return {"gpu": gpu, "cleared": cleared, "mig": mig}

    async def post_instance_xid(request: web.Request) -> Any:
        body = await _body(request, ("gpu", "xid", "gpu_instance", "compute_instance"))
        gpu, xid, gpu_instance = _int(body, "gpu"), _int(body, "xid"), _int(body, "gpu_instance")
        compute_instance = _int(body, "compute_instance", required=False)
        return {"delivered": node.inject_instance_xid(gpu, xid, gpu_instance, compute_instance)}

    async def get_host(request: web.Request) -> Any:
        if host is None:
            raise LookupError("this simulated node has no simulated host (kubelet, runtime, /proc)")
        return host.info()

    app.router.add_post("/sim/v1/reboot", _guarded(post_reboot))
    app.router.add_post("/sim/v1/reset", _guarded(post_reset))
    app.router.add_post("/sim/v1/mig/xid", _guarded(post_instance_xid))
    app.router.add_get("/sim/v1/host", _guarded(get_host))
    app.router.add_get("/sim/v1/pods", _guarded(get_pods))
    app.router.add_post("/sim/v1/pods", _guarded(post_pod))
    app.router.add_delete("/sim/v1/pods", _guarded(delete_pod))
    app.router.add_post("/sim/v1/pods/phase", _guarded(post_pod_phase))
    app.router.add_post("/sim/v1/sources", _guarded(post_source))
    app.router.add_get("/sim/v1/faults", _guarded(get_faults))
    app.router.add_post("/sim/v1/faults", _guarded(post_fault))
    app.router.add_delete("/sim/v1/faults", _guarded(delete_fault))
    app.router.add_get("/sim/v1/processes", _guarded(get_processes))
    app.router.add_post("/sim/v1/processes", _guarded(post_process))
    app.router.add_delete("/sim/v1/processes", _guarded(delete_process))
