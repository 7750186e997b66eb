# syntax=docker/dockerfile:1
# One image for every gpuqueue component: `gpuqueue webhook|extender|certs|simulate`.
# The base is pinned by digest (multi-platform index of python:3.11.13-slim-bookworm); bump tag
# and digest together.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm@sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1

# --- build: install gpuqueue and its dependencies into a virtualenv ------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY gpuqueue ./gpuqueue
COPY extender ./extender
COPY webhook ./webhook
COPY certs ./certs
# The versions are the tested set in constraints.txt. Every dependency ships wheels for CPython
# 3.11 on amd64 and arm64: no compiler needed.
# pip and setuptools leave the virtualenv once gpuqueue is installed.
RUN python -m venv /opt/gpuqueue \
    && /opt/gpuqueue/bin/pip install --no-cache-dir -c /src/constraints.txt /src \
    && /opt/gpuqueue/bin/pip uninstall --yes pip setuptools

# --- runtime: the virtualenv only, as a numeric non-root user ------------------------------
FROM ${PYTHON_IMAGE}
# The base image's own pip and setuptools are not needed at run time.
RUN python -m pip uninstall --yes --no-cache-dir pip setuptools wheel
COPY --from=build /opt/gpuqueue /opt/gpuqueue
ENV PATH=/opt/gpuqueue/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# 65532 is the conventional "nonroot" uid; the manifests run with runAsUser 65532 too.
USER 65532:65532
ENTRYPOINT ["gpuqueue"]
CMD ["--help"]
