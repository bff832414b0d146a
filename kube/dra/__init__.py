"""The Kubernetes DRA driver: devices published as ResourceSlices, prepared per ResourceClaim by the agent.

Run it as ``runtimekit dra serve`` (or ``python -m runtimekit.kube.dra serve``); docs/dra.md
describes it. It speaks the kubelet's plugin registration API and DRA plugin API v1 and v1beta1
(proto/pluginregistration, proto/dra, vendored), the resource.k8s.io/v1 API through the official
``kubernetes`` client, and reaches the node agent only through runtimekit.v1 on the agent's
socket: never the slicer, the node state, the exporter or the health checker.

Layers: ``config`` (the YAML schema) and ``names``; the runtimekit.v1 client is ``runtimekit.kube.agentclient``;
publishing: ``devices`` (pure: the agent's node -> devices), ``resourceslices`` (their slices),
``publisher`` (keeps the pool current); preparing: ``claims`` (reading a ResourceClaim),
``sliceconfig`` (the opaque SliceConfig), ``plan`` (pure: a claim -> what to make),
``checkpoint``, ``cdi`` (the NICs' specs), ``prepare`` (the two-phase prepare and unprepare);
``plugin`` and ``registration`` (the kubelet's sockets: servicers that only translate);
``service`` (the process); ``cli``.
"""
