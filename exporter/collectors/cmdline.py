"""Command lines of tenants' processes as a label: bounded, redacted, then truncated, in linear time.

A command line is the tenant's input (/proc/<pid>/cmdline: up to the kernel's ARG_MAX, 2 MiB and
more). The redactor reads at most ``input_limit`` characters of it (``DEFAULT_INPUT_LIMIT``, 4 KiB,
or 16 times the label's length when that is more), whole arguments only — an argument cut in two
could hide a secret from the pattern (``postgres://bob:pw`` without its ``@``) —, then redacts and
truncates to ``max_length``. The default pattern never backtracks across a run of name characters
(one start per run, possessive tails), so its time is linear in what it reads: the former pattern
started at every word boundary of a long argument and took 8.5 s for 20 KB. Its other branches keep
that: a URL's authority is read once from its ``://`` (it ends at the next ``/``), and mysql's
option chain once from the argument before its program word (the chain never holds another one).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

from runtimekit.exporter.collectors.attribution import label_text

__all__ = [
    "DEFAULT_CMDLINE_MAX_LENGTH",
    "DEFAULT_CMDLINE_REDACT",
    "DEFAULT_INPUT_LIMIT",
    "REDACTED",
    "TRUNCATED",
    "CommandRedactor",
]

REDACTED = "<redacted>"
TRUNCATED = "..."
DEFAULT_CMDLINE_MAX_LENGTH = 256  # characters of the ``command`` label
DEFAULT_INPUT_LIMIT = 4096  # characters of the command line read before redacting (at least)

_SECRET_WORDS = r"(?:password|passwd|secret|token|key|credential)"
_MYSQL_CLIENTS = r"(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump|mariadb-admin)"
DEFAULT_CMDLINE_REDACT = (
    r"(?i)"
    # mysql's -p<password> (case-sensitive: -P is the port). An empty match at the start of the
    # argument before the client's program word, whose look-ahead captures the password, so the
    # arguments it reads over stay open to the other branches. The program word is a whole argument
    # (mysql, /usr/bin/mysql) in program position: first on the line, or after an argument that is
    # not an option, or after "--" or a shell's -c ("--name mysql -p3306:3306" is docker's -p). Only
    # options may stand between it and -p: attached (-uroot, --host=db) or a value-taking one and
    # its value (-h db, --user root).
    r"(?-i:(?<!\S)(?=(?:^|(?:--|-[a-z]*c|(?!-)\S++)\s++)(?:/[\w./-]*bin/)?"
    + _MYSQL_CLIENTS
    + r"(?:\s++(?:-[hPuDS]\s++(?!-)\S++|--(?:host|user|port|database|socket)\s++(?!-)\S++|(?!-p)-\S++))*+"
    r"\s++-p(?P<value_mysql>\S+)))"
    # A flag or a NAME=value assignment whose name contains a secret word; a flag's value may also
    # be the next argument: --password=x, -token=x, --token x, --api-key:x, --db.password x,
    # API_KEY=x, AWS_SECRET_ACCESS_KEY=x. A bare word is only redacted before "=" or before ": "
    # (a header, "X-Api-Key: x"), so "--model monkey" and "keycloak:21" stay.
    # The name starts a run of name characters ([\w.-], after a flag's dashes) and is taken whole
    # (possessive): one attempt per run, not one per word boundary inside it.
    r"|(?<![\w.-])(?P<flag>--?)?\b(?=[\w.-]*?" + _SECRET_WORDS + r")[\w.-]++"
    r"(?(flag)(?:=|:\s*|\s+)|(?:=|:\s+))(?P<value>\S+)"
    # A header named like a secret right after curl's/wget's -H/--header: -H X-Api-Key:x
    r"|(?:(?-i:(?<=-H\s))|(?<=--header[\s=]))(?=[\w.-]*?" + _SECRET_WORDS + r")[\w.-]++:\s*(?P<value_header>\S+)"
    # Authorization and Proxy-Authorization headers: the scheme and the credential
    r"|authorization\s*+:\s*+(?P<value_auth>(?:(?:bearer|basic|digest|negotiate|token)\s++)?\S+)"
    # A URL's userinfo, up to the last "@" of the authority: scheme://user:password@host keeps the
    # user name; scheme://token@host and scheme://:password@host lose all of it
    r"|://(?:[^\s/?#:@]*+:)?(?P<value_url>[^\s/?#]+)@"
)


class CommandRedactor:
    """Joins a command line with spaces, redacts it and truncates it.

    The pattern's named groups whose name starts with ``value`` are what gets replaced by
    ``<redacted>`` (the whole match where none of them took part, or where it has none), so the
    flag names stay readable. A value that stops at a space inside its argument runs on to the end
    of that argument: ``--password "a b"`` is redacted whole, not just ``a``. Redaction runs before
    truncation, so a cut never leaves half a secret; a command line longer than ``input_limit``
    characters loses its later arguments before redaction and always ends in ``...``.
    """

    def __init__(self, pattern: str = DEFAULT_CMDLINE_REDACT, max_length: int = DEFAULT_CMDLINE_MAX_LENGTH) -> None:
        try:
            self.pattern = re.compile(pattern)
        except re.error as error:
            raise ValueError(f"process collector: cmdline_redact is not a valid regular expression: {error}") from None
        if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < len(TRUNCATED) + 1:
            raise ValueError(f"process collector: cmdline_max_length must be an integer >= {len(TRUNCATED) + 1}, got {max_length!r}")
        self.max_length = max_length
        self.input_limit = max(DEFAULT_INPUT_LIMIT, 16 * max_length)
        self._value_groups = [name for name in self.pattern.groupindex if name.startswith("value")]

    def bounded(self, cmdline: Sequence[str]) -> tuple[list[str], bool]:
        """The whole arguments that fit in ``input_limit`` characters (joined with spaces), and
        whether any was left out. The first argument is cut when it alone is too long."""
        kept: list[str] = []
        used = 0
        for arg in cmdline:
            if used + len(arg) > self.input_limit:
                if not kept:
                    kept.append(arg[: self.input_limit])
                return kept, True
            kept.append(arg)
            used += len(arg) + 1
        return kept, False

    def __call__(self, cmdline: Sequence[str]) -> str:
        args, cut = self.bounded(cmdline)
        texts = [label_text(arg) for arg in args]
        joined = " ".join(texts)
        ends: list[int] = []
        offset = 0
        for arg_text in texts:
            offset += len(arg_text)
            ends.append(offset)
            offset += 1
        spans: list[tuple[int, int]] = []
        for match in self.pattern.finditer(joined):
            groups = [name for name in self._value_groups if match.start(name) != -1]
            found = [match.span(name) for name in groups] or [match.span()]
            for start, end in found:
                if end <= start:
                    continue
                holder = bisect.bisect_right(ends, end - 1)  # the argument holding the value's last character
                if holder < len(ends) and end < ends[holder] and joined[end].isspace():
                    end = ends[holder]  # the value stopped at a space inside its argument: take the rest of it
                spans.append((start, end))
        out, position = [], 0
        for start, end in sorted(spans):
            if end <= position:
                continue
            start = max(start, position)
            out.append(joined[position:start])
            out.append(REDACTED)
            position = end
        out.append(joined[position:])
        command = "".join(out)
        if cut or len(command) > self.max_length:
            command = command[: self.max_length - len(TRUNCATED)] + TRUNCATED
        return command
