"""Secret files that can never authenticate are refused at start, naming the key (and the line):
an empty file, a basic entry without a user or a password, a bearer token an HTTP header cannot
carry. ``runtimekit remediate serve`` exits 2 with one line and starts no journal."""

from __future__ import annotations

import pytest
from conftest import write_config

from runtimekit.kube.remediation.cli import main

REPLACEMENT = "http://127.0.0.1:9/replace"


@pytest.fixture(autouse=True)
def token(tmp_path):
    (tmp_path / "token").write_text("s3cret\n")


def _refused(tmp_path, capsys, expected: str, **extra) -> str:
    config = write_config(tmp_path, REPLACEMENT, **extra)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["serve", "--config", config]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith("runtimekit: error: ") and expected in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no journal was started
    return err


@pytest.mark.parametrize("content", ["", "\n", "  \n\n"])
def test_an_empty_replacement_token_file_is_refused(tmp_path, capsys, content):
    (tmp_path / "spare-token").write_text(content)
    _refused(tmp_path, capsys, f"replacement.token_file: {tmp_path / 'spare-token'} is empty",
             replacement={"url": REPLACEMENT, "token_file": str(tmp_path / "spare-token")})


@pytest.mark.parametrize("content,expected", [
    ("am:\n", "line 1: the password is empty"),
    (":pw\n", "line 1: the user is empty"),
    ("am\n", "line 1: must be USER:PASSWORD"),
    ("am:pw\nbob:pw2\n", "line 2: the file holds one USER:PASSWORD line"),
    ("am:p\x07w\n", "line 1: the password has a control character"),
    ("a\x1bm:pw\n", "line 1: the user has a control character"),
    ("", "is empty"),
])
def test_a_basic_file_entry_that_cannot_authenticate_is_refused(tmp_path, capsys, content, expected):
    (tmp_path / "basic").write_text(content)
    err = _refused(tmp_path, capsys, expected, auth={"basic_file": str(tmp_path / "basic")})
    assert err.startswith(f"runtimekit: error: auth.basic_file: {tmp_path / 'basic'}"), err


@pytest.mark.parametrize("key", ["auth.token_file", "replacement.token_file"])
@pytest.mark.parametrize("content,position", [("tök", 2), ("s3cr\x01t", 5), ("Bearer\x7f", 7), ("🙂", 1)])
def test_a_token_no_http_header_can_carry_is_refused(tmp_path, capsys, key, content, position):
    (tmp_path / "bad-token").write_text(content + "\n")
    section = {"token_file": str(tmp_path / "bad-token")}
    extra = {"auth": section} if key == "auth.token_file" else {"replacement": {"url": REPLACEMENT, **section}}
    err = _refused(tmp_path, capsys, f"{key}: {tmp_path / 'bad-token'}: character {position} is not printable "
                                     "ASCII (an HTTP header cannot carry it)", **extra)
    assert content not in err  # the secret is never shown
