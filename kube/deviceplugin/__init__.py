"""The Kubernetes device plugin: whole GPUs and MIG devices for the kubelet, placed by the agent.

Run it as ``runtimekit device-plugin serve`` (or ``python -m runtimekit.kube.deviceplugin serve``);
docs/deviceplugin.md describes it. It speaks the kubelet's device plugin API v1beta1
(proto/deviceplugin/v1beta1, vendored) and reaches the node agent only through runtimekit.v1 on
the agent's socket: never the slicer, the node state, the exporter or the health checker.

Layers: ``config`` (the YAML schema) and ``names``; the runtimekit.v1 client is ``runtimekit.kube.agentclient``;
``inventory`` (pure: the agent's node and health -> the devices per resource); ``watch`` (keeps
them current); ``allocation`` (preferred sets and Allocate's answers); ``plugin`` (the servicer,
which only translates) and ``kubelet`` (registration); for gang placement, optionally, ``offer``
(pure: the devices, the topology and what pods hold -> the node's offer), ``nodeapi`` (its only
Kubernetes API use: one annotation of its own Node) and ``offer_writer`` (keeps it current);
``service`` (the process); ``cli``.
"""
