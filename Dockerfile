# The autoscaler daemon's image (deploy/base/deployment.yaml runs it):
#   docker build -t registry.example.com/llm-autoscaler:0.1.0 .
# Two stages: the package and its dependencies are installed into a virtual environment in the first
# and only that environment is copied into the second, so the image holds no source tree, build
# backend or pip cache. Both stages are the same base image, so the venv's interpreter link holds.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# What `pip install .` reads: the project metadata (pyproject.toml names README.md) and the three
# packages (models ships its profiles/*.json, autoscaler its default_fleet.yaml as package data).
COPY pyproject.toml README.md ./
COPY autoscaler ./autoscaler
COPY controllers ./controllers
COPY models ./models
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install . \
 && /opt/venv/bin/autoscaler --help >/dev/null

FROM python:3.11-slim
COPY --from=build /opt/venv /opt/venv
# Runs with a read-only root filesystem: no bytecode written at run time (pip compiled it at install),
# HOME and matplotlib's cache on the /tmp emptyDir, logs unbuffered.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib
RUN groupadd --system --gid 65532 autoscaler \
 && useradd --system --uid 65532 --gid 65532 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin autoscaler
# Numeric, so the kubelet can check runAsNonRoot without a passwd lookup.
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["autoscaler"]
CMD ["run", "--config", "/etc/autoscaler/fleet.yaml", "--port", "9090"]
