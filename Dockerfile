# syntax=docker/dockerfile:1
# The stagelens agent as a container image: `stagelens serve` on 0.0.0.0:9481.
#
#   docker build -t stagelens:0.1.0 .                      # CPU torch (the lab engine runs on the CPU)
#   docker build -t stagelens:0.1.0-cuda \
#     --build-arg BASE=nvidia/cuda:12.8.1-runtime-ubuntu24.04 \
#     --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 .
#
# A CUDA base without Python 3.11+ gets it from its distribution: ubuntu24.04 ships 3.12 as python3; on
# ubuntu22.04 add --build-arg PYTHON=python3.11 (python3 there is 3.10, too old for stagelens).
# The agent itself needs no CUDA: NVML comes from the driver, which the NVIDIA container runtime mounts
# (NVIDIA_DRIVER_CAPABILITIES=utility below). CUDA matters only to run the bundled lab engine on a GPU;
# then build with --build-arg NVIDIA_DRIVER_CAPABILITIES=compute,utility.
#
# Every Python dependency is the version requirements.lock pins (what `make test` installs); torch is
# installed first from TORCH_INDEX with TORCH_SPEC, as the Makefile does, because the lock leaves it out.

ARG BASE=python:3.11-slim-trixie

# --- the base both stages share: a Python 3.11+ that can make a venv --------------------------------------
FROM ${BASE} AS python
ARG PYTHON=python3
SHELL ["/bin/sh", "-eu", "-c"]
# hadolint ignore=DL3008
RUN if ! "$PYTHON" -c 'import ensurepip, sys, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then \
      apt-get update; \
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$PYTHON" "$PYTHON-venv"; \
      rm -rf /var/lib/apt/lists/*; \
      "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; \
    fi

# --- build: a venv at /opt/stagelens with torch, the locked dependencies and stagelens ---------------------
FROM python AS build
ARG PYTHON=python3
ARG TORCH_SPEC=torch==2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/stagelens/bin:$PATH
# TORCH_SPEC pins torch (hadolint cannot see through the argument)
# hadolint ignore=DL3013
RUN "$PYTHON" -m venv /opt/stagelens && pip install --index-url "$TORCH_INDEX" "$TORCH_SPEC"
COPY requirements.lock /src/requirements.lock
RUN pip install -r /src/requirements.lock
COPY pyproject.toml README.md /src/
COPY agent /src/agent
COPY probes /src/probes
COPY engine_hooks /src/engine_hooks
COPY runbooks /src/runbooks
RUN pip install --no-deps /src

# --- runtime: the venv, an unprivileged user, nothing else ------------------------------------------------
FROM python AS runtime
ARG BASE=python:3.11-slim-trixie
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG NVIDIA_DRIVER_CAPABILITIES=utility
LABEL org.opencontainers.image.title="stagelens" \
      org.opencontainers.image.description="Node-side agent that says which LLM-serving bottleneck stage is firing: KV cache, scheduler or cold path" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="${BASE}"
# A fixed numeric uid, so Kubernetes' runAsNonRoot can check it (the DaemonSet runs it as 65534 anyway).
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/stagelens \
      --shell /usr/sbin/nologin stagelens
COPY --from=build /opt/stagelens /opt/stagelens
# NVIDIA_*: with the NVIDIA container runtime, every GPU is visible to NVML and none is taken for compute.
# STAGELENS_HEALTHCHECK_URL: where HEALTHCHECK asks; change it with --listen.
ENV PATH=/opt/stagelens/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/stagelens \
    XDG_CACHE_HOME=/home/stagelens/.cache \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=${NVIDIA_DRIVER_CAPABILITIES} \
    STAGELENS_HEALTHCHECK_URL=http://127.0.0.1:9481/healthz
USER 10001:10001
WORKDIR /home/stagelens
EXPOSE 9481
# No curl in a slim image: the venv's Python asks /healthz (200 while the process answers).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/opt/stagelens/bin/python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['STAGELENS_HEALTHCHECK_URL'], timeout=3)"]
ENTRYPOINT ["stagelens"]
CMD ["serve", "--listen", "0.0.0.0:9481"]
