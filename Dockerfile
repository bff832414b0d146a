# The image of every Runtime Kit process: the node agent (`runtimekit serve`), the device plugin,
# the DRA driver and the cluster services (remediation, gang placement), which differ only in their
# arguments (deploy/kubernetes). NVML itself comes from the host driver through the NVIDIA container
# runtime (it mounts libnvidia-ml.so and the /dev/nvidia* devices into the container); the image
# holds only Python, runtimekit and its dependencies, with the kube extra (the Kubernetes client
# the DRA driver and the cluster services use; the agent never imports it).
#
# Two stages: the builder makes a wheel of runtimekit and of each dependency; the final stage
# installs those wheels offline, so it has no build tools and no source tree.
#
# The base image is pinned to a patch release; for a release build pin its digest too
# (python:3.11.13-slim-bookworm@sha256:...). tests/deploy/test_dockerfile.py checks this file.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
WORKDIR /src
# runtimekit/exporter, runtimekit/healthcheck, runtimekit/slicer, runtimekit/topology and runtimekit/kube are symbolic
# links to the top-level folders (../exporter, ...): COPY keeps the links as links, so the folders
# they point to are copied beside runtimekit/, and the wheel holds them as runtimekit.exporter etc.
COPY pyproject.toml README.md LICENSE ./
COPY runtimekit ./runtimekit
COPY exporter ./exporter
COPY healthcheck ./healthcheck
COPY slicer ./slicer
COPY topology ./topology
COPY kube ./kube
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels ".[kube]"

FROM ${PYTHON_IMAGE}
COPY --from=builder /wheels /wheels
RUN python -m pip install --no-cache-dir --no-index --find-links /wheels "runtimekit[kube]" \
    && rm -rf /wheels \
    && useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin runtimekit \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/runtimekit
# What the NVIDIA container runtime should give the container: all GPUs, NVML only.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Non-root by default: NVML needs only the /dev/nvidia* devices, which the runtime grants, so
# `runtimekit serve` (and `--sim`) run as this user, and so do the remediation service and the gang
# placer. Attribution needs more: connecting to the kubelet pod-resources and CRI sockets
# (root-owned, 0660) needs uid 0, and the host's /proc entries it reads (stat, statm, cmdline,
# cgroup) are world-readable -- reading other users' environ, fd or exe would need CAP_SYS_PTRACE,
# which the agent does not use. So the agent's DaemonSet (deploy/kubernetes/base/agent.yaml) runs
# this image as uid 0 with every capability dropped, as do the device plugin's and the DRA
# driver's (the kubelet's sockets are root's).
USER 10001:10001
# The agent's /metrics and API (9445), the remediation webhook (9446), the gang admission webhook (9443).
EXPOSE 9445 9446 9443
ENTRYPOINT ["runtimekit"]
CMD ["serve"]
