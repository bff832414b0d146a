"""The simulated GPU node: a fake NVML library below pynvml, scenarios and fault injection.

    node = SimulatedNode(load_scenario("dgx-h100"), seed=1)
    install(node)            # pynvml (and anything built on it) now sees 8 simulated H100s
    node.inject(3, "xid", xid=79)

The simulator is a stand-in for the driver, never a copy of the agent's logic: it only answers
C-level NVML calls (``nvml.FakeNvmlLibrary``) from the node state (``node.SimulatedNode``).
"""

from .faults import FAULT_KINDS, FaultError, FaultSpec, ParamSpec
from .install import install, installed, uninstall
from .node import SimulatedNode
from .nvml import FakeNvmlLibrary
from .scenario import Scenario, ScenarioError, list_scenarios, load_scenario

__all__ = [
    "FAULT_KINDS",
    "FakeNvmlLibrary",
    "FaultError",
    "FaultSpec",
    "ParamSpec",
    "Scenario",
    "ScenarioError",
    "SimulatedNode",
    "install",
    "installed",
    "list_scenarios",
    "load_scenario",
    "uninstall",
]
