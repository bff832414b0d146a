"""The command line's client of a running agent: JSON over HTTP, stdlib only and synchronous.

Used for the simulator's control API (``/sim/v1/...``, served only when the agent runs on the
simulated node) and by tests; an unreachable agent and a refused request are told apart."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

__all__ = ["AgentClientError", "AgentRejectedError", "inject_remote", "reboot_remote", "request_json"]


class AgentClientError(RuntimeError):
    """The agent could not be reached, or its answer was not usable."""


class AgentRejectedError(AgentClientError, ValueError):
    """The agent answered 4xx: the request was invalid or refused (its message is included).

    Also a ValueError, so a CLI treats it as a usage error."""


def request_json(method: str, url: str, body: dict[str, Any] | None = None, timeout: float = 5.0) -> dict:
    """Send ``body`` as JSON and return the decoded JSON answer (AgentClientError otherwise)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")
        try:
            detail = json.loads(detail).get("error", detail)
        except (ValueError, AttributeError):
            pass
        cls = AgentRejectedError if 400 <= exc.code < 500 else AgentClientError
        raise cls(f"{method} {url}: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise AgentClientError(f"agent at {url} is unreachable: {reason}") from None
    except ValueError as exc:
        raise AgentClientError(f"{method} {url}: answer is not JSON: {exc}") from None


def inject_remote(
    agent_url: str, gpu: int, fault: str, params: dict, clear: bool = False, timeout: float = 5.0
) -> dict:
    """Inject (or with ``clear``, clear) ``fault`` on ``gpu`` of the agent at ``agent_url``.

    Returns the agent's JSON answer: {"fault": {...}} or {"cleared": n}.
    """
    url = agent_url.rstrip("/") + "/sim/v1/faults"
    if clear:
        return request_json("DELETE", url, {"gpu": gpu, "fault": fault}, timeout)
    return request_json("POST", url, {"gpu": gpu, "fault": fault, "params": params or {}}, timeout)


def reboot_remote(agent_url: str, timeout: float = 5.0) -> dict:
    """Simulate a reboot of the simulated node of the agent at ``agent_url``.

    Returns the agent's JSON answer: {"boot_id": str | None, "cleared": n} (faults cleared).
    Raises AgentRejectedError on 4xx (e.g. 403 for a non-loopback caller), AgentClientError otherwise.
    """
    return request_json("POST", agent_url.rstrip("/") + "/sim/v1/reboot", {}, timeout)
