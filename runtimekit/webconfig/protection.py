"""What a web configuration file protects a listener with, and the rule that a reload may raise it
but never lower it.

A file re-read while serving may change certificates, keys, client CAs, passwords and allowed SANs.
A reading that would serve with *less* than the listener has served with is refused instead:
``tls_server_config`` removed (plain HTTP), every ``basic_auth_users`` entry removed (no password),
a weaker ``client_auth_type`` (``RequireAndVerifyClientCert`` > ``VerifyClientCertIfGiven`` >
``NoClientCert``), or ``client_allowed_sans`` removed. Such a file is what a config tool leaves
between truncating the file and writing it again, or a mistake; either way the listener fails
closed (``source.py``) until a file that keeps the protection appears. Lowering it on purpose
needs a restart. Raising it (TLS, users, a stricter client policy added to a running listener) is
applied at once, and from then on it is the level a reload may not go below.

exporter-toolkit has no such rule (it serves whatever the file says at each request); this is
where we differ, and docs/security.md says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import WebConfig

#: client_auth_type from weakest to strongest (the refused unverified ones never get this far).
CLIENT_AUTH_ORDER = ("NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")


@dataclass(frozen=True, slots=True)
class Protection:
    """The protection one reading gives: TLS, the client certificate policy, passwords, allowed SANs."""

    tls: bool = False
    client_auth: int = 0  # index in CLIENT_AUTH_ORDER
    basic_auth: bool = False
    allowed_sans: bool = False

    @classmethod
    def of(cls, config: WebConfig) -> Protection:
        tls = config.tls
        return cls(tls=tls is not None,
                   client_auth=CLIENT_AUTH_ORDER.index(tls.client_auth_type) if tls is not None else 0,
                   basic_auth=bool(config.users),
                   allowed_sans=tls is not None and tls.client_allowed_sans is not None)

    def raised_to(self, other: Protection) -> Protection:
        """The stronger of the two in each part (the floor after ``other`` was accepted)."""
        return Protection(self.tls or other.tls, max(self.client_auth, other.client_auth),
                          self.basic_auth or other.basic_auth, self.allowed_sans or other.allowed_sans)

    def lowered_by(self, other: Protection) -> str | None:
        """What ``other`` drops of this protection, in words (None: it drops nothing)."""
        if self.tls and not other.tls:
            return "tls_server_config: removed (the listener serves with TLS)"
        if other.client_auth < self.client_auth:
            return (f"tls_server_config.client_auth_type: {CLIENT_AUTH_ORDER[other.client_auth]} is weaker than "
                    f"{CLIENT_AUTH_ORDER[self.client_auth]} (the listener's)")
        if self.basic_auth and not other.basic_auth:
            return "basic_auth_users: every user removed (the listener asks for a password)"
        if self.allowed_sans and not other.allowed_sans:
            return "tls_server_config.client_allowed_sans: removed (the listener admits only those SANs)"
        return None
