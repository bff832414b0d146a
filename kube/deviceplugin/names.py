"""Names the kubelet accepts: extended resource names, and the plugin's socket file per resource.

Rules from Kubernetes (k8s.io/apimachinery validation.IsQualifiedName and DNS-1123 subdomain;
k8s.io/kubernetes pkg/apis/core/v1/helper IsExtendedResourceName, which the kubelet's device
manager applies to RegisterRequest.resource_name): ``DOMAIN/NAME`` with DOMAIN a lower-case DNS
subdomain of at most 253 characters outside ``kubernetes.io``, and NAME 1-63 characters of
``[A-Za-z0-9._-]`` that start and end alphanumeric.
"""

from __future__ import annotations

import re

from runtimekit.kube.k8s_names import QUALIFIED_NAME, SUBDOMAIN

_NOT_IN_NAME = re.compile(r"[^-A-Za-z0-9_.]")


def resource_name_problem(name: str) -> str | None:
    """Why ``name`` is not an extended resource name, or None when it is one."""
    domain, slash, rest = name.partition("/")
    if not slash:
        return "must be DOMAIN/NAME (nvidia.com/gpu)"
    if not domain or len(domain) > 253 or not SUBDOMAIN.fullmatch(domain):
        return "its domain must be a lower-case DNS subdomain (nvidia.com)"
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return "its domain must not be kubernetes.io (reserved for native resources)"
    if not rest or len(rest) > 63 or not QUALIFIED_NAME.fullmatch(rest):
        return "its name must be 1-63 characters of A-Z a-z 0-9 . _ - starting and ending alphanumeric"
    return None


def mig_resource(prefix: str, profile: str) -> str:
    """The resource of a MIG profile: ``prefix`` + profile ("nvidia.com/mig-" + "3g.40gb"), any
    character a resource name cannot hold replaced by "." (our rule: "1g.10gb+me" -> "1g.10gb.me")."""
    return prefix + _NOT_IN_NAME.sub(".", profile)


def endpoint_of(resource: str) -> str:
    """The plugin's socket file name for ``resource`` (RegisterRequest.endpoint, relative to the
    kubelet's device-plugins directory): "runtimekit-nvidia.com_gpu.sock"."""
    return "runtimekit-" + resource.replace("/", "_") + ".sock"
