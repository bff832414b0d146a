"""An operator's thresholds file is the agent's ``health.thresholds``: every error reading or
validating it names that key first, then the file and the rule (the agent prints it as its one
line at start); the packaged file's errors say it is the packaged one."""

from __future__ import annotations

import pytest

from runtimekit.healthcheck.thresholds import KEY, ThresholdError, load_thresholds


def test_the_key_named_is_the_agents_key():
    from runtimekit.config import SCHEMA

    assert KEY == "health.thresholds" and KEY in SCHEMA


def test_a_missing_file_names_the_key_once_and_the_file(tmp_path):
    missing = tmp_path / "absent.yaml"
    with pytest.raises(ThresholdError) as caught:
        load_thresholds(missing)
    assert str(caught.value) == f"health.thresholds: cannot read {missing}: No such file or directory"


@pytest.mark.parametrize("content,rule", [
    ("ecc: {retired_pages_limt: 3}\n", "ecc.retired_pages_limt: unknown key"),
    ("ecc: {retired_pages_limit: 0}\n", "ecc.retired_pages_limit: must be between 1 and 64"),
    ("- a list\n", "thresholds must be a mapping"),
])
def test_a_bad_file_names_the_key_the_file_and_the_rule(tmp_path, content, rule):
    (tmp_path / "t.yaml").write_text(content)
    with pytest.raises(ThresholdError) as caught:
        load_thresholds(tmp_path / "t.yaml")
    assert str(caught.value).startswith(f"health.thresholds: {tmp_path / 't.yaml'}: {rule}")


def test_a_file_that_is_not_yaml_names_the_key(tmp_path):
    (tmp_path / "t.yaml").write_text("ecc: [unclosed\n")
    with pytest.raises(ThresholdError, match=r"^health\.thresholds: .*t\.yaml: not valid YAML"):
        load_thresholds(tmp_path / "t.yaml")

