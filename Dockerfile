# syntax=docker/dockerfile:1
#
# escrow-keeper container image.
#
#   docker build -t escrow-keeper .
#   docker run --rm -v "$PWD/keeper.toml:/etc/keeper/keeper.toml:ro" -v keeper-data:/data \
#     -e KEEPER_PRIVATE_KEY escrow-keeper
#
# Two stages: `build` installs the hash-pinned dependencies into a venv and adds the
# project as a wheel; `runtime` copies only that venv onto a clean base, so neither the
# source tree nor any build tool ships. tests/ship/test_ship_image.py builds and runs this
# image with podman (scripts/podman-image; docs/operations.md, "Podman") and
# tests/ship/test_ship_install.py performs its install steps outside an engine, so a
# broken step fails the test suite.

# The base is pinned by version; bump it deliberately (and rebuild) for security fixes.
# Any Debian bookworm image with `python` 3.11 and its venv module serves (both stages use
# it): scripts/podman-image makes one locally where no registry can be reached.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build

# Package index settings (a mirror, a proxy's CA bundle, index credentials) come in as
# optional build secrets, so none of them is written into a layer or the image history:
#   --secret id=pip.conf,src=FILE   a pip configuration file for the install steps
#   --secret id=pip-cert,src=FILE   a CA bundle (name it `cert = /run/secrets/pip-cert` there)
# Without them pip uses PyPI with its own CA bundle.
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONFIG_FILE=/run/secrets/pip.conf \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src

# A C compiler, in this stage only, for the getLogs reply scanner (keeper/rpc/_logscan.c):
# the runtime stage gets the built module and no compiler. The official image carries the
# Python headers; a base with Debian's python3 (the local one scripts/podman-image makes)
# gets them from python3-dev. Versions are Debian's for the pinned base.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && { python -c 'import pathlib, sys, sysconfig; sys.exit(not pathlib.Path(sysconfig.get_paths()["include"], "Python.h").exists())' \
         || apt-get install -y --no-install-recommends python3-dev; } \
    && rm -rf /var/lib/apt/lists/*

# Dependencies first, alone, so source edits do not invalidate this (slow) layer.
# --require-hashes: every file must match the lock, or the build fails.
COPY requirements.lock requirements-build.lock ./
RUN --mount=type=secret,id=pip.conf --mount=type=secret,id=pip-cert \
    python -m venv /opt/keeper \
    && /opt/keeper/bin/pip install --require-hashes --no-deps -r requirements.lock \
    && python -m venv /opt/build \
    && /opt/build/bin/pip install --require-hashes --no-deps -r requirements-build.lock

# The project itself, built as a wheel with the pinned backend and installed without
# resolving anything (everything it needs is already in the venv from the lock). The
# setuptools that `venv` seeds is a build backend the daemon never uses: it goes. The
# scanner is checked for in the installed package (-P: not the source tree in /src).
COPY pyproject.toml README.md ./
COPY keeper ./keeper
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
    && /opt/keeper/bin/pip install --no-deps --no-index /wheels/escrow_keeper-*.whl \
    && /opt/keeper/bin/pip uninstall --yes --quiet setuptools \
    && /opt/keeper/bin/keeper --version \
    && /opt/keeper/bin/python -P -c "from keeper.rpc.logs_reply import NATIVE; assert NATIVE, 'the getLogs scanner was not built'"


FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="escrow-keeper" \
      org.opencontainers.image.description="Indexer, verdict verifier and keeper for ERC-8183 job escrows and ERC-8195 task markets" \
      org.opencontainers.image.licenses="Apache-2.0"

# A fixed non-root uid/gid so volume ownership is predictable across rebuilds.
RUN groupadd --system --gid 10001 keeper \
    && useradd --system --uid 10001 --gid keeper --home-dir /data --no-create-home \
       --shell /usr/sbin/nologin keeper \
    && mkdir -p /data /etc/keeper \
    && chown keeper:keeper /data

COPY --from=build /opt/keeper /opt/keeper
COPY config/keeper.example.toml /etc/keeper/keeper.example.toml

# KEEPER_API__LISTEN: in a container the API must listen beyond loopback to be scraped;
# it is an ordinary override (docs/configuration.md), so `-e KEEPER_API__LISTEN=...`
# changes it, and the health check below follows it.
# KEEPER_LOG__FORMAT: JSON lines for log collectors.
ENV PATH=/opt/keeper/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    KEEPER_API__LISTEN=0.0.0.0:9464 \
    KEEPER_LOG__FORMAT=json

# The database (and any verdict directory) lives here. The working directory is / so
# the example config's relative `data/keeper.db` also lands in this volume.
VOLUME ["/data"]
WORKDIR /

USER 10001:10001

EXPOSE 9464

# Liveness only (/healthz): readiness (/readyz) fails during a long backfill, which is
# not a reason to restart the container. No curl in a slim image: urllib does it.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; port = os.environ.get('KEEPER_API__LISTEN', ':9464').rpartition(':')[2]; urllib.request.urlopen('http://127.0.0.1:' + port + '/healthz', timeout=4)"]

# Exec form: keeper itself is PID 1 (no shell in between), so SIGTERM reaches its handler
# and it shuts down cleanly, persisting in-flight transactions, within the grace period.
STOPSIGNAL SIGTERM
ENTRYPOINT ["keeper"]
CMD ["run", "--config", "/etc/keeper/keeper.toml"]
