"""The cluster services, as kubectl renders the overlays that hold them, checked against the code:
the remediation service (kube/remediation) and the gang placer (kube/gang) load their ConfigMap's
file with their own schema (and the gang placer's offers come from what the installation's node
allocator writes), listen where their container ports and Services say, find their
secrets where the Secrets are mounted and serve the paths their probes, Alertmanager and the
admission webhook configuration ask for."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from deploy_files import ROOT, config_map_file, container_argv, find, mount_of, parse_command_line, volume
from rendered import container, holding, installations, pod_spec, render

from runtimekit.kube.deviceplugin import config as device_plugin_config
from runtimekit.kube.gang import config as gang_config
from runtimekit.kube.gang import gangs, webhook
from runtimekit.kube.remediation import config as remediation_config
from runtimekit.kube.remediation.server import make_app as remediation_app
from runtimekit.schema import parse_listen
from runtimekit.webconfig.model import parse_web_config

INSTALLATIONS = installations()
ALERTMANAGER = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"


def service_config(documents: tuple[dict[str, Any], ...], workload: dict[str, Any], item: dict[str, Any], tmp_path: Path,
                   load: Any) -> tuple[Any, Any]:
    args = parse_command_line(container_argv(item))
    path = tmp_path / Path(args.config).name
    path.write_text(config_map_file(documents, workload["metadata"]["namespace"], pod_spec(workload), item, args.config))
    return args, load(path)


def named_port(item: dict[str, Any], name: str) -> int:
    (port,) = [p["containerPort"] for p in item.get("ports", []) if p["name"] == name]
    return int(port)


def secret_behind(workload: dict[str, Any], item: dict[str, Any], path: str) -> tuple[str, str]:
    """(Secret name, key) that the file ``path`` in the container comes from."""
    mount = mount_of(item, path)
    assert mount is not None, f"{path} is in no volumeMount"
    source = volume(pod_spec(workload), mount["name"]).get("secret")
    assert source is not None, f"{path} is not mounted from a Secret"
    key = mount.get("subPath") or path[len(mount["mountPath"].rstrip("/")) + 1:]
    return source["secretName"], key


def routes(app: Any) -> set[tuple[str, str]]:
    return {(route.method, route.resource.canonical) for route in app.router.routes()}


# ---- remediation -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", holding("remediation"))
def test_remediation_serves_where_its_port_service_and_alertmanager_say(name, tmp_path):
    documents = render(INSTALLATIONS[name])
    workload = find(documents, "Deployment", "runtimekit-remediation")
    item = container(workload, "remediation")
    args, config = service_config(documents, workload, item, tmp_path, remediation_config.load)
    assert (args.command, args.remediate_command) == ("remediate", "serve")
    port = named_port(item, "http")
    assert parse_listen(config.listen)[1] == port
    service = find(documents, "Service", "runtimekit-remediation")
    (service_port,) = service["spec"]["ports"]

    # The app as it would run, its secrets and journal moved under tmp_path (no cluster: nodes=object()).
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    app = remediation_app(dataclasses.replace(config, db_path=str(tmp_path / "journal.db"),
                                              auth=dataclasses.replace(config.auth, token_file=str(token))), nodes=object())
    served = routes(app)
    for probe in ("readinessProbe", "livenessProbe"):
        get = item[probe]["httpGet"]
        assert ("GET", get["path"]) in served and get["port"] == "http", probe

    receivers = yaml.safe_load(ALERTMANAGER.read_text())["receivers"]
    urls = [urlsplit(hook["url"]) for receiver in receivers for hook in receiver.get("webhook_configs", [])]
    assert urls, "Alertmanager's configuration sends to the remediation webhook"
    for url in urls:
        assert url.hostname == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc", url.geturl()
        assert url.port == service_port["port"] and ("POST", url.path) in served, url.geturl()


@pytest.mark.parametrize("name", holding("remediation"))
def test_remediation_reads_its_token_from_the_secret_and_writes_its_journal_on_the_volume(name, tmp_path):
    documents = render(INSTALLATIONS[name])
    workload = find(documents, "Deployment", "runtimekit-remediation")
    item = container(workload, "remediation")
    _, config = service_config(documents, workload, item, tmp_path, remediation_config.load)
    assert secret_behind(workload, item, config.auth.token_file) == ("runtimekit-remediation-token", "token")
    journal = mount_of(item, config.db_path)
    assert journal is not None and not journal.get("readOnly", False), "db_path is on a writable mount"
    claim = volume(pod_spec(workload), journal["name"]).get("persistentVolumeClaim")
    assert claim is not None, "the journal outlives the pod (a PersistentVolumeClaim)"
    assert str(Path(config.db_path).parent) == journal["mountPath"], "db_path's folder must exist: the volume's root"


# ---- gang placement ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", holding("gang"))
def test_gang_webhook_is_served_where_the_api_server_is_sent(name, tmp_path):
    documents = render(INSTALLATIONS[name])
    workload = find(documents, "Deployment", "runtimekit-gang")
    item = container(workload, "gang")
    args, config = service_config(documents, workload, item, tmp_path, gang_config.load)
    assert (args.command, args.gang_command) == ("gang", "serve")
    assert config.webhook.listen is not None, "the webhook adds the gate to gang pods"
    port = named_port(item, "webhook")
    assert parse_listen(config.webhook.listen)[1] == port
    service = find(documents, "Service", "runtimekit-gang")
    (service_port,) = service["spec"]["ports"]
    assert service_port["targetPort"] == "webhook"

    served = routes(webhook.make_app(config.namespaces))
    for probe in ("readinessProbe", "livenessProbe"):
        get = item[probe]["httpGet"]
        assert ("GET", get["path"]) in served and get["port"] == "webhook" and get["scheme"] == "HTTPS", probe

    configuration = find(documents, "MutatingWebhookConfiguration", "runtimekit-gang")
    selected = set()
    for entry in configuration["webhooks"]:
        assert entry["clientConfig"]["service"] == {"name": service["metadata"]["name"], "namespace": service["metadata"]["namespace"],
                                                    "path": webhook.PATH, "port": service_port["port"]}
        assert ("POST", webhook.PATH) in served
        assert entry["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                                   "scope": "Namespaced"}]
        assert entry["admissionReviewVersions"] == [webhook.API_VERSION.split("/")[1]]
        (expression,) = entry["objectSelector"]["matchExpressions"]
        assert expression["operator"] == "Exists"
        selected.add(expression["key"])
    assert selected == {gangs.JOBSET_NAME, gangs.GANG_LABEL}, "every label that makes a pod part of a gang"


@pytest.mark.parametrize("name", holding("gang"))
def test_gang_certificate_comes_from_the_tls_secret_mounted_whole(name, tmp_path):
    """The web configuration file (listener.web_config_file) is valid and its tls_server_config
    names the certificate and key of the Secret runtimekit-gang-webhook-tls."""
    documents = render(INSTALLATIONS[name])
    workload = find(documents, "Deployment", "runtimekit-gang")
    item = container(workload, "gang")
    _, config = service_config(documents, workload, item, tmp_path, gang_config.load)
    path = config.listener.web_config_file
    assert path is not None
    text = config_map_file(documents, workload["metadata"]["namespace"], pod_spec(workload), item, path)
    tls = parse_web_config(yaml.safe_load(text), path).tls
    assert tls is not None, "the API server calls webhooks over HTTPS only"
    for path, key in ((tls.cert_file, "tls.crt"), (tls.key_file, "tls.key")):
        assert secret_behind(workload, item, path) == ("runtimekit-gang-webhook-tls", key)
        mount = mount_of(item, path)
        assert mount is not None and "subPath" not in mount, "a subPath mount never sees a renewed certificate"


@pytest.mark.parametrize("name", holding("gang"))
def test_gang_reads_offers_from_the_node_allocator_installed_beside_it(name, tmp_path):
    documents = render(INSTALLATIONS[name])
    workload = find(documents, "Deployment", "runtimekit-gang")
    _, config = service_config(documents, workload, container(workload, "gang"), tmp_path, gang_config.load)
    daemonsets = {d["metadata"]["name"] for d in documents if d["kind"] == "DaemonSet"}
    if "runtimekit-dra" in daemonsets:
        classes = {d["metadata"]["name"] for d in documents if d["kind"] == "DeviceClass"}
        assert config.offers.source == "resourceslices" and f"device.driver == '{config.offers.driver}'" in str(
            [d["spec"] for d in documents if d["kind"] == "DeviceClass"])
        assert set(config.demand.gpu_device_classes) | set(config.demand.nic_device_classes) <= classes
    else:
        assert "runtimekit-device-plugin" in daemonsets and config.offers.source == "annotation"
        plugin = find(documents, "DaemonSet", "runtimekit-device-plugin")
        _, plugin_config = service_config(documents, plugin, container(plugin, "device-plugin"), tmp_path,
                                          lambda path: device_plugin_config.load(path, {"node_name": "gpu-node-0"}))
        assert plugin_config.offer_annotation.enabled, "the device plugin writes the annotation the placer reads"
