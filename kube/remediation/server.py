"""The webhook receiver (aiohttp) and the worker that executes journaled actions.

``POST /api/v1/alerts`` answers 200 only after the journal commit; any 4xx journals nothing, and
a journal it cannot write (another process holds its lock) is a 503 that Alertmanager retries.
Alerts naming an invalid node are refused by the parser (listed in the answer, counted); new firing
alerts that ask for nothing by mistake (no node label, an action label that is no action) are
journaled, counted by reason and logged (actions.unactionable). Every route but ``/healthz``
(liveness) and ``/readyz`` (readiness: the journal can be written) needs the webhook's credentials
(auth.py), checked with TLS, the request-size limit and the rest of the web configuration file by
the listener's gate (``runtimekit.webconfig.Guard``).

The worker runs pending actions in ladder order, one at a time, and writes each outcome in the
transaction that marks it done. The replacement call carries the action's idempotency key, so a
crash between the call and the commit leads to a retry the receiver can recognise; a step started
``max_step_runs`` times without finishing fails instead of running again. A step that began runs
to its outcome though its alert resolves meanwhile (journal.py); one whose alert resolved after the
worker read it, before it began, is not run. An outcome the journal cannot record (the action no
longer pending: changed by something else) is logged as a warning with the outcome and counted in
``runtimekit_remediation_outcomes_not_recorded_total``, never dropped in silence. An undo step
(uncordon, untaint) is given the other alerts on its node that still fire, whose need it keeps
(holds.py). A drain
waiting on a PodDisruptionBudget holds the worker for at most ``drain.timeout_seconds``; a failed
step is journaled with its result (the drain's still-blocked pods) and the later steps are skipped.
A Kubernetes call that fails (``nodes.ApiError``: refused, or the API server not reached) — the
breaker's node count included — fails its step with a one-line error, logged as one line, and
the worker goes on with the other pending actions. A dry run makes no Kubernetes call at all.

``make_app`` checks everything a person sets up before anything is served — the credential
files, the web configuration file, the journal's folder, the kubeconfig (or the in-cluster service
account) — and raises
``ConfigError`` naming the key and the rule, so ``runtimekit remediate serve`` exits 2 with one line.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from aiohttp import web

from runtimekit.documents import DocumentError, load_json
from runtimekit.json_requests import not_declared_json
from runtimekit.schema import ConfigError
from runtimekit.state.health import ACTIONS
from runtimekit.webconfig import GUARD

from . import actions as steps_module
from .auth import make_guard, read_token
from .breaker import BreakerPolicy, breaker_verdict, cooldown_verdict, needs_cluster_size
from .config import RemediationConfig
from .journal import DISRUPTIVE, UNDOES, Action, Journal
from .journal_file import JournalError, JournalLocked, check_path
from .nodes import ApiError, ClusterAccessError, KubernetesNodeApi, NodeApi
from .payload import Alert, PayloadError, parse

log = logging.getLogger(__name__)

JOURNAL = web.AppKey("journal", Journal)
CONFIG = web.AppKey("config", RemediationConfig)
COUNTERS = web.AppKey("counters", Counter)
RETRY_AFTER_SECONDS = 10  # what a 503 asks Alertmanager to wait (it retries with its own back-off)
ACTIONS_LIMIT = 1000  # the newest actions GET /api/v1/actions answers with (it says how many it left out)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


@web.middleware
async def json_errors(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
    """A path that is not served (404) or a method a path does not take (405, with ``Allow``)
    answered as every other error of this JSON API is: ``{"error": ...}``."""
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return _error(404, f"no such path: {request.path[:200]!r}")
    except web.HTTPMethodNotAllowed as error:
        allowed = ", ".join(sorted(error.allowed_methods))
        return _error(405, f"{request.method[:20]} is not allowed on {request.path}; allowed: {allowed}",
                      headers={"Allow": allowed})


async def post_alerts(request: web.Request) -> web.Response:
    config, counters = request.app[CONFIG], request.app[COUNTERS]
    refused = not_declared_json(request)  # what Alertmanager sends; refused before the body is read
    if refused is not None:
        counters["rejected_415"] += 1
        return _error(415, refused)
    try:  # a declared Content-Length over max_body_bytes was refused by the guard already
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:  # a chunked body that grew past it
        counters["rejected_413"] += 1
        return _error(413, f"body larger than {config.max_body_bytes} bytes")
    try:
        notification = parse(load_json(raw, what="body", max_bytes=config.max_body_bytes), config.node_label)
    except (DocumentError, PayloadError) as error:  # the rule broken, never the body
        counters["rejected_400"] += 1
        return _error(400, str(error))
    unknown = {a.labels.get(config.action_label, "") for a in notification.alerts} - set(ACTIONS)
    if unknown:
        log.warning("alerts with %s label %s ask for nothing (not an action name: %s)", config.action_label,
                    ", ".join(sorted(map(repr, unknown))), ", ".join(ACTIONS))
    if notification.refused:
        counters["alerts_refused"] += len(notification.refused)
        log.warning("refused %d alert(s) of group %s, never acted on: %s", len(notification.refused),
                    notification.group_key, "; ".join(r.error for r in notification.refused[:3]))
    journal = request.app[JOURNAL]
    unactionable: list[tuple[str, Alert]] = []  # (reason, alert): new alerts that ask for nothing by mistake
    try:
        received = await asyncio.to_thread(journal.receive, notification.alerts,
                                           steps_module.collecting_plan(config, unactionable), time.time())
    except sqlite3.Error as error:  # locked by another process past BUSY_SECONDS, or the disk refuses
        counters["rejected_503"] += 1
        log.warning("webhook answered 503: the journal %s cannot be written: %s", journal.path, error)
        return web.json_response({"error": f"the journal cannot be written now ({error}); nothing was recorded, "
                                           "retry later"}, status=503,
                                 headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
    counters["alerts_received"] += received.new
    counters.update(f"unactionable_{reason}" for reason, _ in unactionable)
    steps_module.warn_unactionable(config, unactionable)
    counters["alerts_duplicate"] += received.duplicates
    if notification.truncated_alerts:
        log.warning("Alertmanager truncated %d alerts from group %s", notification.truncated_alerts,
                    notification.group_key)
    return web.json_response({"new": received.new, "duplicates": received.duplicates, "actions": received.actions,
                              "refused": [{"fingerprint": r.fingerprint, "error": r.error}
                                          for r in notification.refused]})


async def get_actions(request: web.Request) -> web.Response:
    """The newest ACTIONS_LIMIT actions, newest first, with how many the journal holds (``total``)
    and how many older ones this answer leaves out (``omitted``)."""
    rows, total = await asyncio.to_thread(request.app[JOURNAL].newest, ACTIONS_LIMIT)
    return web.json_response({"actions": [a.as_json() for a in rows], "total": total, "limit": ACTIONS_LIMIT,
                              "omitted": total - len(rows)})


async def get_metrics(request: web.Request) -> web.Response:
    journal, counters = request.app[JOURNAL], request.app[COUNTERS]
    counts = await asyncio.to_thread(journal.counts)
    is_open, _ = await asyncio.to_thread(journal.breaker_state)
    lines = [
        "# HELP runtimekit_remediation_alerts_received_total Alerts journaled (new or changed status).",
        "# TYPE runtimekit_remediation_alerts_received_total counter",
        f"runtimekit_remediation_alerts_received_total {counters['alerts_received']}",
        "# HELP runtimekit_remediation_alerts_duplicate_total Alerts already journaled (same fingerprint, startsAt, status).",
        "# TYPE runtimekit_remediation_alerts_duplicate_total counter",
        f"runtimekit_remediation_alerts_duplicate_total {counters['alerts_duplicate']}",
        "# HELP runtimekit_remediation_alerts_refused_total Alerts refused: their node label is not a valid "
        "Kubernetes node name (never journaled or acted on).",
        "# TYPE runtimekit_remediation_alerts_refused_total counter",
        f"runtimekit_remediation_alerts_refused_total {counters['alerts_refused']}",
        "# HELP runtimekit_remediation_alerts_unactionable_total New firing alerts that ask for nothing by "
        "mistake, by reason (no_node_label: their ladder has steps but they name no node; unknown_action: their "
        "action label is not an action name); journaled, never acted on, each logged as a warning.",
        "# TYPE runtimekit_remediation_alerts_unactionable_total counter",
        *(f'runtimekit_remediation_alerts_unactionable_total{{reason="{r}"}} {counters[f"unactionable_{r}"]}'
          for r in steps_module.UNACTIONABLE),
        "# HELP runtimekit_remediation_requests_rejected_total Requests refused, by HTTP status "
        "(400: a body that breaks a rule, 401: no credentials, 403: client certificate not allowed, 413: body "
        "too large, 415: not application/json, 429: rate limit, 500: web configuration file unusable, 503: the "
        "journal could not be written).",
        "# TYPE runtimekit_remediation_requests_rejected_total counter",
        *(f'runtimekit_remediation_requests_rejected_total{{code="{c}"}} {counters[f"rejected_{c}"]}'
          for c in (400, 401, 403, 413, 415, 429, 500, 503)),
        "# HELP runtimekit_remediation_actions Journaled actions by kind and state (read from the journal).",
        "# TYPE runtimekit_remediation_actions gauge",
        *(f'runtimekit_remediation_actions{{kind="{k}",state="{s}"}} {n}' for (k, s), n in sorted(counts.items())),
        "# HELP runtimekit_remediation_outcomes_not_recorded_total Step outcomes the journal could not "
        "record: the action was no longer pending when its step finished (each logged as a warning).",
        "# TYPE runtimekit_remediation_outcomes_not_recorded_total counter",
        f"runtimekit_remediation_outcomes_not_recorded_total {counters['outcomes_not_recorded']}",
        "# HELP runtimekit_remediation_breaker_open 1 while the circuit breaker is open.",
        "# TYPE runtimekit_remediation_breaker_open gauge",
        f"runtimekit_remediation_breaker_open {int(is_open)}",
    ]
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain", charset="utf-8")


async def healthz(request: web.Request) -> web.Response:
    """Liveness: the process serves (a locked journal is not a reason to restart it)."""
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    """Readiness: 503 while the journal cannot be written, so alerts would not be recorded."""
    problem = await asyncio.to_thread(request.app[JOURNAL].unwritable)
    return web.Response(text=f"not ready: {problem}\n", status=503) if problem else web.Response(text="ok\n")


class Worker:
    """Executes pending actions in ladder order; one action at a time."""

    def __init__(self, config: RemediationConfig, journal: Journal, steps: steps_module.Steps,
                 clock: Callable[[], float] = time.time, counters: Counter | None = None) -> None:
        self.config, self.journal, self.steps, self.clock = config, journal, steps, clock
        self.counters = Counter() if counters is None else counters  # the app's: /metrics shows them
        self.policy = BreakerPolicy(config.breaker.max_nodes, config.breaker.max_percent,
                                    config.breaker.window_seconds, config.breaker.min_nodes)

    async def run_once(self) -> int:
        """Run every pending action that is due; returns how many were finished."""
        finished = 0
        for action in await asyncio.to_thread(self.journal.pending):
            alert = await asyncio.to_thread(self.journal.alert, action.fingerprint, action.starts_at)
            received_at, labels = alert if alert else (action.created_at, {})
            if self.clock() < received_at + self.config.action_delay_seconds:
                continue
            outcome = await self._execute(action, labels)
            if outcome is None:
                continue
            state, result = outcome
            if await asyncio.to_thread(self.journal.finish, action.id, state, result, self.clock()):
                finished += 1
                _log_outcome(action, state, result)
            else:
                self.counters["outcomes_not_recorded"] += 1
                log.warning("action %s %s on %s was no longer pending when its step finished; its outcome, "
                            "not recorded in the journal: %s %s", action.id, action.kind, action.node, state, result)
        return finished

    async def _execute(self, action: Action, labels: dict[str, str]) -> tuple[str, dict[str, Any]] | None:
        """The action's outcome: (state, result), or None when its alert resolved before the step
        began (nothing ran, the journal says skipped). A step that fails — the Kubernetes API
        refused or was not reached, the breaker could not count the nodes — is "failed" with a
        one-line error; only a journal error is raised (the loop reports it, the action stays pending)."""
        siblings = await asyncio.to_thread(self.journal.siblings, action)
        # A forward step needs the earlier ones done (or described, in a dry run); an undo step
        # (uncordon, untaint) always runs: it looks at the node, whatever the journal says, and
        # keeps what the other alerts on the node that still fire need (holds.release).
        earlier = [a for a in siblings if a.id < action.id and a.kind in DISRUPTIVE]
        if action.kind in DISRUPTIVE and any(
                a.state == "failed" or (a.state == "skipped" and not (a.result or {}).get("dry_run")) for a in earlier):
            return "skipped", {"reason": "an earlier step of this alert did not complete"}
        try:
            return await self._attempt(action, labels)
        except steps_module.StepFailed as error:
            return "failed", {**error.result, "error": str(error)}
        except ApiError as error:  # refused or not reached: an ordinary failure, one line
            return "failed", {"error": str(error)}
        except sqlite3.Error:
            raise
        except Exception as error:  # a fault of this service: journaled, and its traceback logged
            log.exception("action %s %s on %s failed", action.id, action.kind, action.node)
            return "failed", {"error": f"{type(error).__name__}: {str(error)[:500]}"}

    async def _attempt(self, action: Action, labels: dict[str, str]) -> tuple[str, dict[str, Any]] | None:
        """The gate, then the step (or its description, in a dry run); None when the action is no
        longer pending as the step would begin (journal.begin_attempt)."""
        if action.kind in DISRUPTIVE:
            gate = await self._gate(action, self.clock())
            if gate is not None:
                if not await asyncio.to_thread(self.journal.is_pending, action.id):
                    return None  # its alert resolved while it was gated: the resolution skipped it
                return "skipped", {"reason": gate}
        if self.config.dry_run:
            return "skipped", steps_module.dry_run_result(self.config, action, labels)
        if action.attempts >= self.config.max_step_runs:
            return "failed", {"error": f"started {action.attempts} times without finishing (the service stopped "
                                       f"while it ran); max_step_runs {self.config.max_step_runs} reached, "
                                       "not run again"}
        if not await asyncio.to_thread(self.journal.begin_attempt, action.id, self.clock()):
            log.info("action %s %s on %s: its alert resolved before the step began; not run", action.id,
                     action.kind, action.node)
            return None
        needed = await asyncio.to_thread(self.journal.still_needed, action) if action.kind in UNDOES else []
        return "done", await self.steps.run(action, labels, needed)

    async def _gate(self, action: Action, now: float) -> str | None:
        """Why a disruptive step must not run now (the cooldown, the breaker), or None. A dry run
        reads the journal only: it never asks the API server for the node count, never opens the
        breaker, and is stopped only by a cooldown or a breaker already open. Its cooldown counts
        the steps it described as if done, so it skips what live mode would skip; live mode never
        counts them (journal.last_other_alert_at)."""
        is_open, _ = await asyncio.to_thread(self.journal.breaker_state)
        last = await asyncio.to_thread(self.journal.last_other_alert_at, action.node, action.fingerprint,
                                       action.starts_at, self.config.dry_run)
        cooldown = cooldown_verdict(last, now, self.config.cooldown_seconds)
        if not cooldown.allowed:
            return cooldown.reason
        if self.config.dry_run:  # the max_nodes rule over what it described; no node count, nothing opened
            described = await asyncio.to_thread(self.journal.actioned, now - self.policy.window_seconds, True)
            verdict = breaker_verdict(self.policy, action.node, now, described, 0, is_open)
            if verdict.allowed:
                return None
            return verdict.reason.replace("circuit breaker opened", "circuit breaker would open") if verdict.opens_breaker \
                else verdict.reason
        actioned = await asyncio.to_thread(self.journal.actioned, now - self.policy.window_seconds)
        needs_total = not is_open and needs_cluster_size(self.policy, action.node, now, actioned)
        total = await self._cluster_size() if needs_total else 0
        verdict = breaker_verdict(self.policy, action.node, now, actioned, total, is_open)
        if verdict.opens_breaker and await asyncio.to_thread(self.journal.open_breaker, verdict.reason, now, action.id):
            log.error("%s", verdict.reason)
        return None if verdict.allowed else verdict.reason

    async def _cluster_size(self) -> int:
        """The cluster's node count, for the breaker's percentage rule; StepFailed (the step is not
        run) when the API server refuses or is not reached."""
        try:
            return await self.steps.nodes.count_nodes()
        except ApiError as error:
            raise steps_module.StepFailed(f"circuit breaker: cannot count the cluster's nodes, so the step did "
                                          f"not run ({error})") from error

    async def loop(self) -> None:
        """Run cycles for ever; a journal that cannot be written is logged when it starts and ends."""
        journal_error = ""
        while True:
            try:
                await self.run_once()
                if journal_error:
                    log.info("the journal can be written again")
                journal_error = ""
            except sqlite3.Error as error:
                if not journal_error:
                    log.warning("the journal cannot be written (%s); retrying every %g s", error,
                                self.config.worker_interval_seconds)
                journal_error = str(error)
            except Exception:
                log.exception("remediation worker cycle failed")
            await asyncio.sleep(self.config.worker_interval_seconds)


def _log_outcome(action: Action, state: str, result: dict[str, Any]) -> None:
    """One line per finished action: a warning with the error when it failed."""
    if state == "failed":
        log.warning("action %s %s on %s failed: %s", action.id, action.kind, action.node, result.get("error"))
    else:
        log.info("action %s %s on %s: %s", action.id, action.kind, action.node, state)


def make_app(config: RemediationConfig, nodes: NodeApi | None = None) -> web.Application:
    """The receiver app; ``nodes`` replaces the Kubernetes client (tests).

    Raises ConfigError (naming the key) for what a person must fix before it can run, and then
    has changed nothing: the journal file is created when the app starts.
    """
    counters: Counter = Counter()
    guard = make_guard(config, counters)
    replacement_token = read_token("replacement.token_file", config.replacement.token_file)
    try:
        check_path(config.db_path)
    except JournalLocked:
        raise  # not a configuration mistake: another process holds it (exit 1)
    except JournalError as error:
        raise ConfigError(f"db_path: {error}") from error
    try:
        node_api = nodes or KubernetesNodeApi(config.kubernetes.kubeconfig, config.kubernetes.context)
    except ClusterAccessError as error:
        raise ConfigError(str(error)) from error
    app = web.Application(client_max_size=config.max_body_bytes, middlewares=[guard.middleware, json_errors])
    app[GUARD] = guard
    app[CONFIG] = config
    app[COUNTERS] = counters

    @asynccontextmanager
    async def journal_context(app: web.Application) -> AsyncIterator[None]:
        app[JOURNAL] = Journal(config.db_path)
        try:
            yield
        finally:
            app[JOURNAL].close()

    @asynccontextmanager
    async def worker_context(app: web.Application) -> AsyncIterator[None]:
        async with aiohttp.ClientSession() as session:
            worker = Worker(config, app[JOURNAL], steps_module.Steps(config, node_api, session, replacement_token),
                            counters=counters)
            task = asyncio.create_task(worker.loop(), name="remediation-worker")
            try:
                yield
            finally:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass

    app.cleanup_ctx.append(journal_context)
    app.cleanup_ctx.append(worker_context)
    app.router.add_post("/api/v1/alerts", post_alerts)
    app.router.add_get("/api/v1/actions", get_actions)
    app.router.add_get("/metrics", get_metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app
