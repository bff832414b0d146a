"""Alertmanager webhook receiver that remediates GPU nodes: payload → journal → ladder, with a breaker."""

from .journal import Journal, reset_breaker
from .payload import Notification, PayloadError, parse

__all__ = ["Journal", "Notification", "PayloadError", "parse", "reset_breaker"]
