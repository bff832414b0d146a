"""Generators of the files derived from the code (``scripts/gen-docs``), kept out of the package:
nothing the agent or the services run imports them.

- ``docs/reference/configuration.md``: every configuration key of every command, from the schema
  objects (``runtimekit.schema.Key``) the commands validate with (``config_reference``);
- ``docs/reference/metrics.md``: every metric family the agent can emit, recorded while a real
  agent runs on the simulated node (``metrics_reference``, ``metrics_probe``);
- ``docs/reference/api.md``: the gRPC API ``runtimekit.v1``, its structure from the generated
  descriptors and its words from the comments of proto/runtimekit/v1/*.proto (``api_reference``);
- ``deploy/kubernetes/monitoring/``: the copies of the alert rules (as a PrometheusRule) and the
  Grafana dashboards that kustomize needs inside the component's folder (``deploy_copies``).

``targets.TARGETS`` names them all; tests/deploy/test_generated_files.py regenerates each and
compares it with the checked-in file.
"""
