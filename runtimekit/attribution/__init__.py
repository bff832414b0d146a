"""Attribution: GPU processes to containers and pods (kubelet pod-resources, CRI, /proc cgroups)."""
