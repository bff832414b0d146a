"""Lost card: a GPU that fell off the bus, answers GPU_IS_LOST, or vanished from the node.

Signals (gpu-faults.md §2.3, §6 "GPU lost"); severity, action and clearing are the fault policy's
(``healthcheck/policy.yaml``: critical, ``reboot_node``, sticky until a reboot):

- ``gpu_lost``: the snapshot marks the GPU lost (NVML answered GPU_IS_LOST on some call), or
  XID 79 arrived for it.
- ``gpu_missing``: a GPU present in the previous snapshot (by UUID) is gone, or moved to another
  PCI bus id; or the node has fewer GPUs than ``expected_gpus`` and a GPU this detector has seen
  before (its state remembers every UUID with its index and bus id) is not among them.
- ``gpu_count_low`` (node-level: no GPU named): fewer GPUs than expected and no known GPU to blame
  (e.g. the first sample after the agent started, state lost).

An enumerated GPU whose UUID the driver could not give (``is_available(gpu.uuid)`` is False) is
not "missing": it is still on the bus, and the driver detector reports its read errors. It holds
no index: the GPU known at that index is not blamed while an unreadable GPU is enumerated there.
A GPU lost before its UUID was ever read is named by the UUID last seen at its index; when none
was seen, its ``gpu_lost`` is node-level (evidence names the index).
Nothing is judged while NVML is down (the driver detector reports that).
"""

from __future__ import annotations

from typing import Any

from runtimekit.gpu.types import GpuSnapshot, is_available
from runtimekit.healthcheck.policy import default_policy
from runtimekit.healthcheck.types import DetectorInput, Finding

from ._common import clock, identified, merge, unidentified, uuid_of

NAME = "lost_card"


def _bus(gpu: GpuSnapshot) -> str | None:
    bus = gpu.identity.pci_bus_id
    return bus if is_available(bus) else None


def lost_card(state: Any, data: DetectorInput) -> tuple[Any, list[Finding]]:
    known: dict[str, list[Any]] = {k: list(v) for k, v in ((state or {}).get("known") or {}).items()}
    snapshot = data.snapshot
    if snapshot is None or not snapshot.nvml_up:
        return {"known": known}, []
    policy = default_policy()
    findings: list[Finding] = []
    if data.previous is not None and data.previous.nvml_up:  # what the previous sample saw is known too
        for seen in identified(data.previous.gpus):
            if not seen.gpu.lost:
                known.setdefault(seen.uuid, [seen.gpu.index, _bus(seen.gpu)])

    by_index: dict[int, str] = {int(v[0]): k for k, v in known.items()}
    for gpu in snapshot.gpus:
        if gpu.lost:
            what = ", ".join(name for name, _ in gpu.errors) or "a query"
            bus = _bus(gpu)
            evidence = (f"NVML answered GPU_IS_LOST for GPU {gpu.index}{f' ({bus})' if bus else ''} in {what} "
                        f"at {clock(gpu.sampled_at)}; the device is unreachable, a GPU reset cannot work")
            # A GPU lost before its identity was read: name it by the UUID last seen at its index.
            uuid = uuid_of(gpu) or by_index.get(gpu.index)
            if uuid is not None:
                findings.append(policy.finding(gpu.index, uuid, "gpu_lost", evidence))
            else:
                findings.append(policy.node_finding("gpu_lost", f"{unidentified(gpu)}: {evidence}"))

    for event in data.xids:
        entry = policy.xid(event.xid)
        if entry.detector != NAME:
            continue
        findings.append(policy.finding(
            event.gpu_index, event.uuid, entry.fault, f"XID {event.xid} ({entry.meaning}) at {clock(event.received_at)}",
        ))

    present = identified(snapshot.gpus)
    current = {g.uuid for g in present}
    unreadable = {g.index for g in snapshot.gpus if uuid_of(g) is None}  # enumerated, identity unknown
    current_bus = {g.uuid: _bus(g.gpu) for g in present}
    gone: dict[str, tuple[int, str]] = {}  # uuid -> (index, why)
    previous = data.previous
    if previous is not None and previous.nvml_up:
        for old in identified(previous.gpus):
            if old.gpu.lost:
                continue
            index, old_bus = old.gpu.index, _bus(old.gpu)
            if old.uuid not in current:
                if index in unreadable:
                    continue  # still enumerated, just unreadable
                where = f" at {old_bus}" if old_bus else ""
                gone[old.uuid] = (index, f"GPU {index} ({old.uuid}{where}) vanished between the samples at "
                                         f"{clock(previous.sampled_at)} and {clock(snapshot.sampled_at)}")
            elif old_bus and current_bus.get(old.uuid) and current_bus[old.uuid] != old_bus:
                gone[old.uuid] = (index, f"GPU {index} ({old.uuid}) moved from PCI bus id {old_bus} to "
                                         f"{current_bus[old.uuid]} between two samples")

    count = len(snapshot.gpus)
    if count < data.expected_gpus:
        shortfall = f"{count} of {data.expected_gpus} expected GPUs present (NVML device count {snapshot.device_count})"
        blamed = False
        for uuid, (index, bus) in sorted(known.items(), key=lambda kv: kv[1][0]):
            if uuid in current or index in unreadable:
                continue
            blamed = True
            if uuid not in gone:
                gone[uuid] = (index, f"GPU {index} ({uuid}{f' at {bus}' if bus else ''}) is missing")
            gone[uuid] = (index, f"{gone[uuid][1]}; {shortfall}")
        if not blamed and not gone:
            findings.append(policy.node_finding(
                "gpu_count_low",
                f"{shortfall} at {clock(snapshot.sampled_at)}; which GPU vanished is unknown (no earlier sample)",
            ))
    for uuid, (index, evidence) in gone.items():
        findings.append(policy.finding(index, uuid, "gpu_missing", evidence))

    for seen in present:
        if not seen.gpu.lost:
            known[seen.uuid] = [seen.gpu.index, _bus(seen.gpu)]
    return {"known": known}, merge(findings)


lost_card.name = NAME  # type: ignore[attr-defined]
detector = lost_card
