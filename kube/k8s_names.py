"""Names the Kubernetes API server accepts, as apimachinery's validation checks them: the one copy
the container layer's services share (k8s.io/apimachinery pkg/util/validation).

- A DNS-1123 subdomain (``IsDNS1123Subdomain``): at most 253 characters of lower-case letters,
  digits, ``-`` and ``.``, each ``.``-separated part starting and ending with a letter or digit.
  A Node's name is one (``ValidateNodeName``), as are DeviceClass names and, at most 63
  characters long, a DRA driver's name.
- A qualified name's name part (``IsQualifiedName``): 1-63 characters of letters, digits, ``-``,
  ``_`` and ``.``, starting and ending with a letter or digit; label keys, taint keys and extended
  resource names are an optional DNS-subdomain prefix, ``/``, and such a name.
"""

from __future__ import annotations

import re

__all__ = ["MAX_SUBDOMAIN", "QUALIFIED_NAME", "SUBDOMAIN", "node_name_problem"]

MAX_SUBDOMAIN = 253
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def node_name_problem(name: str) -> str | None:
    """Why ``name`` is not a Node's name, or None when it is one."""
    if len(name) > MAX_SUBDOMAIN or not SUBDOMAIN.fullmatch(name):
        return f"must be a Node's name: a lower-case DNS subdomain of at most {MAX_SUBDOMAIN} characters"
    return None
