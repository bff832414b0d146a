"""The remediation ladders: which steps the service takes for an alert, keyed by the agent's action.

Every alert of alerts/runtimekit.rules.yml carries an ``action`` label with the node agent's
recommended action, one of ``runtimekit.state.health.ACTIONS`` (mildest first; docs/health.md,
gpu-faults.md §6). The service picks its ladder from this table by that label alone — never by
alert name or a regular expression — so a new alert needs no change here, and the agent's policy
(the XID catalog, the detectors) is applied once, in the agent.

Steps, in the order they run (each a no-op when the node is already in that state):

- ``cordon``: ``spec.unschedulable=true`` (no new pods on the node);
- ``taint``: the ``taint_key`` NoSchedule taint (what this service added, it can remove);
- ``drain``: evict the node's pods through the Eviction API (PodDisruptionBudgets respected);
- ``replace``: POST the spare-node request to ``replacement.url``.

A configured ``ladders`` mapping is merged over DEFAULT_LADDERS: an action it does not name keeps
its default ladder, and ``[]`` turns an action's ladder off. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtimekit.state.health import ACTIONS, DRAIN_AND_RESET_GPU, NONE, REBOOT_NODE, REPLACE_NODE, RESTART_APPLICATION

CORDON, TAINT, DRAIN, REPLACE = "cordon", "taint", "drain", "replace"
STEPS = (CORDON, TAINT, DRAIN, REPLACE)  # the order a ladder must keep

DEFAULT_LADDERS: dict[str, list[str]] = {
    # Nothing is wrong with the node's hardware, or a person must look (compute mode, throttling).
    NONE: [],
    # The application's own error (XID 13, 31, 43): restarting it is the workload's business.
    RESTART_APPLICATION: [],
    # One GPU needs draining and a reset: the device plugin already withholds it (the agent marks it
    # unhealthy); the node's other GPUs keep working, so the node stays in service.
    DRAIN_AND_RESET_GPU: [],
    # A GPU fell off the bus (XID 79), NVML is down, GPUs are missing: the node is out of service
    # until a reboot, so it is taken out now and a spare requested; it is repaired offline.
    REBOOT_NODE: [CORDON, TAINT, REPLACE],
    # The GPU cannot be repaired in the field (row remap failure, retired pages past the limit): replace.
    # Uncorrectable ECC is drain_and_reset_gpu (healthcheck/policy.yaml): the row is remapped at the reset.
    REPLACE_NODE: [CORDON, TAINT, REPLACE],
}


def ladder_problem(value: Mapping[Any, Any]) -> str | None:
    """Why a ``ladders`` mapping is invalid (for ``runtimekit.schema.Key.check``), or None."""
    for name, steps in value.items():
        if name not in ACTIONS:
            return f"entry {name!r}: must be an action name, one of {', '.join(ACTIONS)}"
        if not isinstance(steps, list):
            return f"entry {name!r}: must map an action to a list of steps ([] for none)"
        for step in steps:
            if step not in STEPS:
                return f"entry {name!r}: step {step!r} is not one of {', '.join(STEPS)}"
        if len(set(steps)) != len(steps):
            return f"entry {name!r}: a step is listed twice"
        if steps != sorted(steps, key=STEPS.index):
            return f"entry {name!r}: steps must keep the order {', '.join(STEPS)}"
    return None


def merged(configured: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """DEFAULT_LADDERS with the configured entries replacing theirs (validated by ladder_problem)."""
    return {action: list(configured.get(action, DEFAULT_LADDERS[action])) for action in ACTIONS}


def steps_for(ladders: Mapping[str, list[str]], action: str) -> list[str] | None:
    """The ordered steps for an alert's ``action`` label; None when the label is not an action name."""
    if action not in ACTIONS:
        return None
    return list(ladders.get(action, ()))
