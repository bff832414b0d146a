"""Topology inside the node: where GPUs and RDMA NICs sit, how near they are, and the choice of
the best-connected GPUs (with their nearest NICs) for a request.

Part of the base: it reads ``runtimekit.state`` (the ``Topology`` vocabulary), ``runtimekit.gpu``
and ``runtimekit.host``, and nothing of the readers or the simulator. Modules: ``allocator``
(pure: the best k GPUs and their NICs) and ``offline`` (a ``Topology`` from a scenario's data,
without an agent); discovery, the distance rule, the component and the HTTP routes join it.
"""
