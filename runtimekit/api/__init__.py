"""The gRPC API runtimekit.v1 (proto/runtimekit/v1/): the one way in for the container layer.

``ApiServer`` serves it inside the agent (``server``); ``AgentServicer`` translates calls to the
slicer's ``SliceService`` and the node state (``servicer``); ``convert`` maps messages to and from
the base's vocabulary. A base package: it imports no room and never the simulator.
"""

from runtimekit.api.server import SERVICE_NAME, ApiServer
from runtimekit.api.servicer import FIELD_METADATA_KEY, STATUS_CODES, AgentServicer

__all__ = ["FIELD_METADATA_KEY", "SERVICE_NAME", "STATUS_CODES", "AgentServicer", "ApiServer"]
