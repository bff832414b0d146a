"""Kubernetes object names: the one rule every node (and pod) name must pass before it reaches a path,
and the rule of a taint key (``qualified_name_problem``), checked when the configuration is loaded.

Node names are DNS-1123 subdomains (k8s.io/apimachinery ``validation.IsDNS1123Subdomain``, used by
``ValidateNodeName``): at most 253 characters, lowercase ASCII letters, digits, ``-`` and ``.``,
starting and ending with a letter or digit. This service further requires every ``.``-separated
label to be at most 63 characters (RFC 1123 hostnames, which is what a kubelet registers), so ``.``,
``..``, ``a/b``, ``A``, unicode and 300-character names are refused. A name that passes is also a
safe URL path segment: it needs no escaping and cannot be a dot segment.
"""

from __future__ import annotations

import re

from runtimekit.kube.k8s_names import QUALIFIED_NAME, SUBDOMAIN

MAX_NAME = 253  # characters of a DNS-1123 subdomain
MAX_LABEL = 63  # characters of each of its labels
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")




class InvalidName(ValueError):
    """A name that is not a valid Kubernetes object name; the message names it (shortened) and the rule."""


def name_problem(value: str) -> str | None:
    """Why ``value`` is not a valid node name (DNS-1123 subdomain), or None."""
    if not value:
        return "must not be empty"
    if len(value) > MAX_NAME:
        return f"must be at most {MAX_NAME} characters (got {len(value)})"
    for label in value.split("."):
        if len(label) > MAX_LABEL:
            return f"each '.'-separated part must be at most {MAX_LABEL} characters"
        if not _LABEL.fullmatch(label):
            return ("must be a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', "
                    "starting and ending with a letter or digit")
    return None


def checked(value: str, what: str = "node name") -> str:
    """``value`` when it is a valid name, else InvalidName (the last check before a request path)."""
    problem = name_problem(value)
    if problem:
        raise InvalidName(f"{what} {value[:80]!r}: {problem}")
    return value


def qualified_name_problem(value: str) -> str | None:
    """Why ``value`` is not a Kubernetes qualified name (a taint or label key: apimachinery
    ``IsQualifiedName``), or None: an optional DNS-1123 subdomain prefix and ``/``, then a name of
    1-63 characters, letters, digits, ``-``, ``_`` and ``.``, starting and ending with a letter or digit."""
    if not value:
        return "must not be empty"
    prefix, slash, name = value.rpartition("/")
    if "/" in prefix:
        return "must have at most one '/' (PREFIX/NAME)"
    if slash and (len(prefix) > MAX_NAME or not SUBDOMAIN.fullmatch(prefix)):
        return (f"the prefix before '/' must be a DNS subdomain of at most {MAX_NAME} characters "
                "(lowercase letters, digits, '-', '.')")
    if len(name) > MAX_LABEL or not QUALIFIED_NAME.fullmatch(name):
        return (f"the name part must be 1-{MAX_LABEL} characters: letters, digits, '-', '_' and '.', "
                "starting and ending with a letter or digit")
    return None
