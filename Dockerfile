# The node agent's image. NVML itself comes from the host driver through the NVIDIA container
# runtime; the image holds only Python and the agent.
FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY runtimekit ./runtimekit
COPY exporter ./exporter
COPY healthcheck ./healthcheck
COPY slicer ./slicer
RUN pip install --no-cache-dir . && rm -rf /src
USER 0
ENTRYPOINT ["runtimekit"]
CMD ["serve"]
