"""The command-line redactor: bounded input, linear-time pattern, the same redactions as before.

(The collector-level redaction tests stay in test_exporter_process_pod.py; these test the
redactor itself.)
"""

from __future__ import annotations

import re
import time

import pytest

from runtimekit.exporter.collectors.cmdline import (
    DEFAULT_CMDLINE_REDACT,
    DEFAULT_INPUT_LIMIT,
    REDACTED,
    CommandRedactor,
)

KIB_128 = 128 * 1024

SECRETS = (
    "python3", "serve.py", "--password=hunter2", "--token", "tok-123", "--db.password", "two words",
    "AWS_SECRET_ACCESS_KEY=AKIAsecret", "api_key=k-42", "--dsn", "postgres://bob:pg-pass@db:5432/app",
    "--model", "monkey", "--epochs=3",
)

# Arguments that made the former pattern backtrack: long runs of name characters full of word
# boundaries or secret words, and a URL-like argument with no "@".
PATHOLOGICAL = {
    "boundaries": "a-" * (KIB_128 // 2),
    "secret words": "key" * (KIB_128 // 3),
    "secret words with dots": "token." * (KIB_128 // 6),
    "flag of boundaries": "--" + "x." * (KIB_128 // 2),
    "url without @": "://user:" + "p:" * (KIB_128 // 2),
}


class SpyPattern:
    """Wraps a compiled pattern and records the length of every text it searched."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern, self.searched = pattern, []

    def finditer(self, text: str):
        self.searched.append(len(text))
        return self.pattern.finditer(text)


def test_the_default_redactions_are_unchanged():
    assert CommandRedactor()(SECRETS) == (
        f"python3 serve.py --password={REDACTED} --token {REDACTED} --db.password {REDACTED} "
        f"AWS_SECRET_ACCESS_KEY={REDACTED} api_key={REDACTED} --dsn postgres://bob:{REDACTED}@db:5432/app "
        "--model monkey --epochs=3"
    )
    assert CommandRedactor()(("app", "-x.token=1", "x.secret=2", "--model", "monkey", "keyring")) == (
        f"app -x.token={REDACTED} x.secret={REDACTED} --model monkey keyring"
    )


@pytest.mark.parametrize("name", PATHOLOGICAL)
def test_a_128_kib_argument_is_bounded_before_the_pattern_runs(name):
    redactor = CommandRedactor()
    spy = SpyPattern(redactor.pattern)
    redactor.pattern = spy  # type: ignore[assignment]
    command = redactor(("python3", PATHOLOGICAL[name], "--token", "tok-123"))
    assert spy.searched and max(spy.searched) <= redactor.input_limit == DEFAULT_INPUT_LIMIT
    assert command == "python3..."  # the later arguments are left out, and it says so
    alone = redactor((PATHOLOGICAL[name],))  # a first argument too long on its own is cut
    assert max(spy.searched) <= redactor.input_limit and alone.endswith("...") and len(alone) == 256


@pytest.mark.parametrize("name", PATHOLOGICAL)
def test_the_default_pattern_is_linear_on_pathological_arguments(name):
    # The former pattern took 8.5 s on 20 KB and minutes on 128 KiB; linear time is milliseconds.
    # A generous bound, so a slow machine never fails it while a quadratic pattern always does.
    pattern = re.compile(DEFAULT_CMDLINE_REDACT)
    started = time.monotonic()
    list(pattern.finditer(PATHOLOGICAL[name] + " --password=x"))
    assert time.monotonic() - started < 2.0


def test_the_bound_keeps_whole_arguments_only():
    # Cutting "postgres://bob:pw@db" before its "@" would hide the password from the pattern.
    redactor = CommandRedactor()
    filler = "x" * (redactor.input_limit - 40)
    url = "postgres://bob:pg-pass-that-is-long@db:5432/app"
    assert redactor.bounded(("app", filler, "--dsn", url)) == (["app", filler, "--dsn"], True)
    assert redactor.bounded(("app", "--dsn", url)) == (["app", "--dsn", url], False)
