"""The container layer's Kubernetes parts (installed as ``runtimekit.kube``).

Cluster-level services that speak to the Kubernetes API: the remediation service
(``runtimekit.kube.remediation``). Nothing here imports the node agent's internals
(``runtimekit.exporter``, ``runtimekit.healthcheck``, ``runtimekit.slicer``, ``runtimekit.sim``);
the shared vocabulary comes from the base (``runtimekit.state``). The ``kubernetes`` client (the
``kube`` extra) is imported only inside the modules that call the API, so the node agent and the
command line never load it (../ARCHITECTURE.md).
"""
