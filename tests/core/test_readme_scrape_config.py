"""The README's scrape job is the one the runbooks and alert rules assume (docs/runbooks.md)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def scrape_job(markdown: Path) -> dict:
    blocks = re.findall(r"```yaml\n(.*?)```", markdown.read_text(), flags=re.S)
    for block in blocks:
        data = yaml.safe_load(block)
        jobs = data.get("scrape_configs", data) if isinstance(data, dict) else data
        for job in jobs if isinstance(jobs, list) else []:
            if isinstance(job, dict) and job.get("job_name") == "runtimekit":
                return job
    raise AssertionError(f"no runtimekit scrape job in {markdown.name}")


def test_the_readme_and_the_runbooks_show_the_same_scrape_job() -> None:
    readme, runbooks = scrape_job(ROOT / "README.md"), scrape_job(ROOT / "docs" / "runbooks.md")
    assert readme == runbooks
    assert readme["honor_labels"] is True  # the agent's namespace/pod/container labels are the workload's
    assert any(rule.get("target_label") == "node" for rule in readme["relabel_configs"])


def test_the_shipped_daemonset_is_what_the_scrape_job_keeps() -> None:
    """The job keeps pods labelled app.kubernetes.io/name=runtimekit-agent, on the port named metrics."""
    job = scrape_job(ROOT / "README.md")
    keeps = {tuple(rule["source_labels"]): rule["regex"] for rule in job["relabel_configs"] if rule.get("action") == "keep"}
    documents = list(yaml.safe_load_all((ROOT / "deploy" / "kubernetes" / "base" / "agent.yaml").read_text()))
    daemonset = next(d for d in documents if d and d.get("kind") == "DaemonSet")
    pod = daemonset["spec"]["template"]
    label = pod["metadata"]["labels"]["app.kubernetes.io/name"]
    assert keeps[("__meta_kubernetes_pod_label_app_kubernetes_io_name",)] == label
    ports = [port["name"] for container in pod["spec"]["containers"] for port in container.get("ports", [])]
    assert keeps[("__meta_kubernetes_pod_container_port_name",)] in ports
