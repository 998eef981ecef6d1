# The autoscaler daemon's image (deploy/base/deployment.yaml runs it):
#   docker build -t registry.example.com/llm-autoscaler:0.1.0 .
# Two stages: the package and its dependencies are installed into a virtual environment in the first
# and only that environment is copied into the second, so the image holds no source tree, build
# backend or pip cache. Both stages are the same base image, so the venv's interpreter link holds.
# The base is pinned by digest (python:3.11-slim-bookworm as published on Docker Hub; a tag moves, a
# digest does not). Docker Hub cannot be reached where this file was written, so the digest was taken
# from a public record of that tag, not pulled here: check it with
# `docker buildx imagetools inspect python:3.11-slim-bookworm` when you renew it.
# The dependencies come from requirements.lock, every one pinned with its hashes (pip-compile
# --generate-hashes from pyproject.toml; the command is at its top): a changed or substituted wheel
# fails the build. tests/unit/test_lock.py checks the lock pins every runtime dependency in its range.
FROM python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91 AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# What `pip install .` reads: the project metadata (pyproject.toml names README.md) and the three
# packages (models ships its profiles/*.json, autoscaler its default_fleet.yaml as package data).
COPY requirements.lock pyproject.toml README.md ./
COPY autoscaler ./autoscaler
COPY controllers ./controllers
COPY models ./models
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --require-hashes --no-deps -r requirements.lock \
 && /opt/venv/bin/pip install --no-deps . \
 && /opt/venv/bin/pip check \
 && /opt/venv/bin/autoscaler --help >/dev/null

FROM python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91
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
EXPOSE 8080
ENTRYPOINT ["autoscaler"]
CMD ["run", "--config", "/etc/autoscaler/fleet.yaml", "--port", "8080"]
