"""The one way the container layer reaches the Kubernetes API: a configured ``kubernetes`` ApiClient.

``api_client(kubeconfig, context)`` reads the kubeconfig file (``context`` or its current one) or,
when ``kubeconfig`` is None, the pod's service account (in-cluster: KUBERNETES_SERVICE_HOST and
/var/run/secrets/kubernetes.io/serviceaccount), at once, so a set-up mistake is found before a
service starts. Every mistake is a ``ClusterAccessError`` whose message names the configuration
key (``kubernetes.kubeconfig``, ``kubernetes.context``: the section ``KubernetesConfig`` that every
container-layer service's configuration has) and the rule, in one line.

The ``kubernetes`` package (the ``kube`` extra) is imported inside the function only, so importing
this module never loads it. Source: kubernetes-client/python ``config.load_kube_config`` and
``config.load_incluster_config`` (kubernetes/config/kube_config.py, incluster_config.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtimekit.schema import file_path, setting

__all__ = ["MESSAGE_CHARS", "ClusterAccessError", "KubernetesConfig", "REQUEST_TIMEOUT_SECONDS", "api_client",
           "error_line", "one_line", "status_message"]

REQUEST_TIMEOUT_SECONDS = (10.0, 30.0)
"""The usual (connect, read) deadline of a service's Kubernetes calls, in seconds: urllib3's pair,
as the client's ``_request_timeout`` takes it. A call without one waits for good on an API server
that accepted the connection and never answers. A service with tighter needs sets its own."""


@dataclass(frozen=True, slots=True)
class KubernetesConfig:
    """How the service reaches the Kubernetes API server: a kubeconfig file and context, or the pod's
    service account when kubeconfig is null. The same section in every container-layer service."""

    kubeconfig: str | None = setting(None, "kubeconfig file (None: the pod's service account, in-cluster)", file_path)
    context: str | None = setting(None, "kubeconfig context (None: the current one)")


class ClusterAccessError(Exception):
    """The Kubernetes client cannot be set up; the message names the key and the rule."""


MESSAGE_CHARS = 500  # the most of a client's or server's error text a service's one-line message keeps


def one_line(text: object, limit: int = MESSAGE_CHARS) -> str:
    """``text`` on one line (each run of white space one space), cut to ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def error_line(error: BaseException) -> str:
    """An exception's text on one line (``one_line``), or its type's name when it has none."""
    return one_line(error) or type(error).__name__


def status_message(body: object) -> str:
    """The ``message`` of the Status an API server answers a refused call with (the client's
    ``ApiException.body``); the body itself when it is no Status; "" when there is none."""
    if not isinstance(body, (str, bytes)):
        return ""
    try:
        return str(json.loads(body)["message"])
    except (ValueError, KeyError, TypeError):  # not JSON, or not a Status object
        return body.decode(errors="replace") if isinstance(body, bytes) else body


def api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A ``kubernetes.client.ApiClient`` for the kubeconfig file ``kubeconfig`` (its ``context``, or
    its current one), or for the pod's service account when ``kubeconfig`` is None.

    Raises ClusterAccessError when the client is not installed, when ``kubeconfig`` is None and
    this is not a pod (no KUBERNETES_SERVICE_HOST / service account token), or when the kubeconfig
    file is missing, unreadable or lacks ``context``. Returned untyped: the client's models are
    not annotated for mypy (and their fields may be None)."""
    try:
        from kubernetes import client, config
    except ImportError as error:
        raise ClusterAccessError(f"the Kubernetes client is not installed ({error.name}): "
                                 "pip install 'runtimekit[kube]'") from error

    configuration = client.Configuration()
    if kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException as error:
            raise ClusterAccessError(
                "kubernetes.kubeconfig: not set, and the service does not run in a Kubernetes pod "
                f"({error_line(error)}); set kubernetes.kubeconfig to a kubeconfig file") from error
    else:
        if not Path(kubeconfig).is_file():
            what = "a directory, not a file" if Path(kubeconfig).is_dir() else "no such file"
            raise ClusterAccessError(f"kubernetes.kubeconfig: {kubeconfig}: {what}")
        try:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
        except Exception as error:  # ConfigException, a YAML error, TypeError for a file that is no mapping
            where = f" (kubernetes.context {context!r})" if context else ""
            why = "it is no YAML mapping of clusters, users and contexts" if isinstance(error, TypeError) else error_line(error)
            raise ClusterAccessError(f"kubernetes.kubeconfig: {kubeconfig}{where} is not a usable kubeconfig: {why}") from error
    return client.ApiClient(configuration)
