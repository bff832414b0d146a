"""Gang placement across nodes: the pods of one gang (a JobSet) on the nodes nearest each other in
the network, all at once or not at all, with the devices inside each node counted.

Modules, one job each:

- ``network``: the tiers (node label keys, widest first; provider presets) and the tree of domains.
- ``offer``: what a node offers (free GPUs by NVLink group, free NICs by PCIe root); the node
  annotation ``runtimekit.io/offer``.
- ``slices``: a node's offer read from its ResourceSlices and the ResourceClaims holding devices.
- ``search``: the exact search for a gang's domain (fewest domains per tier) and the fill of a leaf.
- ``capacity``: per node and domain, what is free less the reservations, kept incrementally.
- ``placer``: the placer (place, reserve, release), its definitions of tiers spanned and lower bound.
- ``cluster``: the cluster and gangs description files of ``runtimekit gang plan``.
- ``plan_cli``: ``runtimekit gang plan``, the placer run offline on those files.

The service, ``runtimekit gang serve`` (docs/gang.md):

- ``gangs``: which pods form one gang, what each asks, how many the gang has (pure).
- ``demand``: a gang's size from its JobSet and the devices its pods' ResourceClaims ask.
- ``nodefit``: the scheduler's checks the placer does not make (node selectors, affinity, taints).
- ``kubeapi``: the reads and writes of the Kubernetes API (informers, patches, events, evictions).
- ``view``: the cluster as the controller sees it, each node's offer read from it.
- ``tracking``: placed gangs between placement and binding: reservations, releases, their end.
- ``controller``: the decision loop, one round at a time; every Placer call happens there.
- ``webhook``: the mutating admission webhook that adds the scheduling gate ``runtimekit.io/gang``.
- ``config``, ``serve``, ``serve_cli``: its configuration, composition and command line.
"""
