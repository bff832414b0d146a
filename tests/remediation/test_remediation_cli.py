"""``runtimekit remediate serve|reset-breaker`` answer set-up mistakes with one line and an exit code.

2 for a usage or configuration mistake (the line names the key or flag and the rule), 1 for a
failure at run time; never a traceback, and a refused command changes nothing.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from runtimekit.kube.remediation.cli import main
from runtimekit.kube.remediation.journal import Journal
from tests.agent_process import ROOT

KUBECONFIG = {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
              "clusters": [{"name": "fake", "cluster": {"server": "http://127.0.0.1:9"}}],
              "users": [{"name": "fake", "user": {"token": "t"}}],
              "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}


@pytest.fixture(autouse=True)
def not_in_a_cluster(monkeypatch):
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)


def _config(tmp_path, **changes) -> str:
    (tmp_path / "token").write_text("s3cret\n")
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(KUBECONFIG))
    data = {"listen": "127.0.0.1:0", "db_path": str(tmp_path / "j.db"), "auth": {"token_file": str(tmp_path / "token")},
            "kubernetes": {"kubeconfig": str(tmp_path / "kubeconfig")}}
    for key, value in changes.items():
        section, _, leaf = key.rpartition(".")
        (data.setdefault(section, {}) if section else data)[leaf] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _one_line(capsys, expected: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 1 and expected in err, err
    return err


@pytest.mark.parametrize("changes,expected", [
    ({"db_path": "{tmp}/absent/j.db"}, "runtimekit: error: db_path: {tmp}/absent/j.db: the folder {tmp}/absent does not exist"),
    ({"kubernetes.kubeconfig": None}, "runtimekit: error: kubernetes.kubeconfig: not set, and the service does not "
                                      "run in a Kubernetes pod"),
    ({"kubernetes.kubeconfig": "{tmp}/no-such-kubeconfig"}, "kubernetes.kubeconfig: {tmp}/no-such-kubeconfig: no such file"),
    ({"kubernetes.context": "elsewhere"}, "kubernetes.kubeconfig: {tmp}/kubeconfig (kubernetes.context 'elsewhere') "
                                         "is not a usable kubeconfig"),
    ({"auth.token_file": "{tmp}/no-token"}, "auth.token_file: cannot read {tmp}/no-token: No such file or directory"),
    ({"replacement.token_file": "{tmp}/no-token"}, "replacement.token_file: cannot read {tmp}/no-token"),
    ({"breaker.max_percent": 150}, "breaker.max_percent: must be between 0 and 100"),
    ({"gpu_label": "gpu_uuid"}, "gpu_label: unknown key"),
    ({"replacement.body_template": {"node": "{nodename}"}},
     "runtimekit: error: replacement.body_template: entry node: unknown field {nodename}"),
])
def test_serve_refuses_setup_mistakes_with_one_line_and_exit_2(tmp_path, capsys, changes, expected):
    tmp = str(tmp_path)
    config = _config(tmp_path, **{k: v.replace("{tmp}", tmp) if isinstance(v, str) else v for k, v in changes.items()})
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["serve", "--config", config]) == 2
    _one_line(capsys, expected.replace("{tmp}", tmp))
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no journal was started


def test_serve_refuses_a_kubeconfig_that_is_not_one(tmp_path, capsys):
    config = _config(tmp_path)
    (tmp_path / "kubeconfig").write_text("not: [yaml")
    assert main(["serve", "--config", config]) == 2
    _one_line(capsys, "kubernetes.kubeconfig: ")


def test_serve_in_a_pod_without_a_service_account_is_a_setup_mistake(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    assert main(["serve", "--config", _config(tmp_path, **{"kubernetes.kubeconfig": None})]) == 2
    _one_line(capsys, "kubernetes.kubeconfig: not set")


def test_serve_with_a_missing_config_file(tmp_path, capsys):
    assert main(["serve", "--config", str(tmp_path / "nope.yaml")]) == 2
    _one_line(capsys, "--config: cannot read")


def test_serve_on_a_taken_port_exits_1(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = _config(tmp_path, listen=f"127.0.0.1:{port}")
        done = subprocess.run([sys.executable, "-m", "runtimekit.kube.remediation", "serve", "--config", config],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"runtimekit: cannot serve on 127.0.0.1:{port}" in done.stderr


def test_the_module_entry_point_reports_a_missing_folder_without_traceback(tmp_path):
    config = _config(tmp_path, db_path=str(tmp_path / "absent" / "j.db"))
    done = subprocess.run([sys.executable, "-m", "runtimekit.cli", "remediate", "serve", "--config", config],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("runtimekit: error: db_path: ") and done.stderr.count("\n") == 1


def test_reset_breaker_on_a_missing_db_refuses_and_creates_nothing(tmp_path, capsys):
    assert main(["reset-breaker", "--db", str(tmp_path / "typo.db")]) == 2
    _one_line(capsys, f"runtimekit: error: --db: {tmp_path / 'typo.db'}: no such journal file")
    assert list(tmp_path.iterdir()) == []


def test_reset_breaker_through_runtimekit_cli(tmp_path, capsys):
    from runtimekit.cli import main as runtimekit_main

    assert runtimekit_main(["remediate", "reset-breaker", "--db", str(tmp_path / "typo.db")]) == 2
    _one_line(capsys, "--db: ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content", [b"hello, not a database\n" * 40, b""])
def test_reset_breaker_on_a_file_that_is_no_journal_changes_nothing(tmp_path, capsys, content):
    path = tmp_path / "notes.db"
    path.write_bytes(content)
    assert main(["reset-breaker", "--db", str(path)]) == 2
    _one_line(capsys, "--db: ")
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


def test_reset_breaker_on_another_sqlite_database_changes_nothing(tmp_path, capsys):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE things (x)")
    before = path.read_bytes()
    assert main(["reset-breaker", "--db", str(path)]) == 2
    _one_line(capsys, "not a remediation journal")
    assert path.read_bytes() == before
    with sqlite3.connect(path) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["things"]


def test_reset_breaker_on_a_folder(tmp_path, capsys):
    assert main(["reset-breaker", "--db", str(tmp_path)]) == 2
    _one_line(capsys, "no such journal file")


def test_reset_breaker_closes_an_open_breaker(tmp_path, capsys):
    journal = Journal(tmp_path / "j.db")
    journal.open_breaker("too many", 1.0)
    journal.close()
    assert main(["reset-breaker", "--db", str(tmp_path / "j.db")]) == 0
    assert capsys.readouterr().out == "circuit breaker closed\n"
    assert main(["reset-breaker", "--db", str(tmp_path / "j.db")]) == 0
    assert capsys.readouterr().out == "circuit breaker was not open\n"


def test_neither_the_cli_nor_the_service_modules_load_kubernetes():
    """The node agent's command line builds its parser from the remediation CLI; neither it nor
    the service's modules may import the `kubernetes` client (only KubernetesNodeApi does)."""
    code = ("import sys, runtimekit.cli; runtimekit.cli.parser(); "
            "import runtimekit.kube.remediation.server, runtimekit.kube.remediation.cli; "
            "assert 'kubernetes' not in sys.modules, sorted(m for m in sys.modules if m.startswith('kubernetes'))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_serve_pointed_at_another_database_refuses_and_leaves_it_alone(tmp_path, capsys):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE things (x)")
    before = path.read_bytes()
    assert main(["serve", "--config", _config(tmp_path, db_path=str(path))]) == 2
    _one_line(capsys, f"runtimekit: error: db_path: {path}: not a remediation journal")
    assert path.read_bytes() == before


NOBODY = 65534  # uid and gid of nobody


@contextlib.contextmanager
def _as_another_user(path):
    """Make the journal at ``path`` one this process may read but not write, as for an operator
    whose uid does not own it: as root (permissions do not bind root), the effective uid and gid
    become nobody's for the block, the file staying root's with mode 0644; otherwise the file is
    made read-only for the block."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(0o644)
        return
    import shutil  # noqa: F401 - loaded now: argparse imports it lazily, and nobody cannot read the stdlib here

    os.setegid(NOBODY)
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


@contextlib.contextmanager
def _journal_folder(mode: int):
    """A folder with an open breaker's journal in it, under /tmp (pytest's folder is root's alone)."""
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, mode)
        path = Path(folder) / "j.db"
        journal = Journal(path)
        journal.open_breaker("too many", 1.0)
        journal.close()
        path.chmod(0o644)
        yield path


@pytest.mark.parametrize("folder_mode", [0o755, 0o777], ids=["folder-read-only-too", "folder-writable"])
def test_reset_breaker_on_a_journal_it_cannot_write_is_a_run_time_failure(capsys, folder_mode):
    """A valid journal the operator's uid cannot write: exit 1, "cannot reset the breaker", not
    "not a SQLite database"; the journal is left as it was."""
    with _journal_folder(folder_mode) as path:
        before = path.read_bytes()
        with _as_another_user(path):
            code = main(["reset-breaker", "--db", str(path)])
        err = _one_line(capsys, f"runtimekit: cannot reset the breaker: {path}: cannot write it")
        assert code == 1, err
        assert "not a SQLite database" not in err and "not a remediation journal" not in err
        assert path.read_bytes() == before
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT open FROM breaker").fetchone() == (1,)


def test_serve_on_a_journal_it_cannot_write_refuses_to_start(capsys):
    """The folder is writable, the journal is not: found at start (exit 2), not as a 503 on every alert."""
    with _journal_folder(0o777) as path:
        (path.parent / "token").write_text("s3cret\n")
        config = path.parent / "config.yaml"
        config.write_text(yaml.safe_dump({"db_path": str(path), "auth": {"token_file": str(path.parent / "token")}}))
        with _as_another_user(path):
            code = main(["serve", "--config", str(config)])
        err = _one_line(capsys, f"runtimekit: error: db_path: {path}: cannot write it")
        assert code == 2, err
