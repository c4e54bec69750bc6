# forewarn agent image, from the repository root:
#   docker build -t forewarn:0.1.0 .
# (tag it REGISTRY/forewarn:TAG to push it; the Kubernetes overlays take that name from
# packaging/kubernetes/components/image/kustomization.yaml).
#
# Run it on the node's network (metadata services answer only there), sharing /run/forewarn
# with the training container through a volume that is the agent's whoever mounts it first:
#   docker volume create --driver local --opt type=tmpfs --opt device=tmpfs \
#     --opt o=uid=10001,gid=10001,mode=0750,size=1m forewarn-run
#   docker run -d --restart unless-stopped --network host -v forewarn-run:/run/forewarn \
#     -v forewarn-state:/var/lib/forewarn forewarn:0.1.0 --provider aws
# (--restart: Docker starts it again after a crash and when the machine boots; without it a
# stopped agent stays stopped and the training container hears nothing. forewarn-state: the
# agent's state outlives the container, so an upgrade of the image keeps the notices in force.)
# (a training container mounts it with `-v forewarn-run:/run/forewarn:nocopy` and names it,
# `-e FOREWARN_RUNTIME_DIR=/run/forewarn`, or a client made before the agent runs looks
# elsewhere for good; one that is not root needs group 10001, `--group-add 10001`, for its
# sockets, and every one a `--stop-timeout` longer than its reclaim save, 10 s by default:
# docs/operations.md).
# The image's settings are its config file, /etc/forewarn/forewarn.toml
# (packaging/container/forewarn.toml): metrics and health on 127.0.0.1:9464 inside the
# container, JSON logs. Mount a forewarn.toml of yours there (it replaces the image's whole)
# or set FOREWARN_* variables, which override any file (docs/operations.md).
# Extras other than `metrics` (k8s for a kubeconfig, aws for drills): --build-arg
# FOREWARN_EXTRAS=metrics,k8s (keep metrics while metrics_address is set).

ARG PYTHON_IMAGE=python:3.12-slim-bookworm

# Stage 1: build the wheel from this source tree.
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE ./
COPY protocol ./protocol
COPY agent ./agent
COPY providers ./providers
COPY clients ./clients
COPY testing ./testing
# The deployment files ship in the package (forewarn render cloud-init reads them).
COPY packaging ./packaging
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

# Stage 2: the runtime. By default only the `metrics` extra: the agent needs httpx, pydantic
# and pyzmq, and prometheus-client for /metrics; the cloud SDKs serve drills only.
FROM ${PYTHON_IMAGE}
# Comma-separated extras of the installed wheel; empty installs none.
ARG FOREWARN_EXTRAS=metrics
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/forewarn/bin:$PATH

RUN groupadd --system --gid 10001 forewarn \
    && useradd --system --uid 10001 --gid forewarn --no-create-home \
        --home-dir /var/lib/forewarn --shell /usr/sbin/nologin forewarn \
    && install -d -o forewarn -g forewarn -m 0750 /run/forewarn /var/lib/forewarn

# Settings in a file, not ENV: a variable beats any config file, so a forewarn.toml mounted
# here had its metrics_address, runtime_dir, state_dir and log_format ignored in silence.
COPY packaging/container/forewarn.toml /etc/forewarn/forewarn.toml
COPY --from=build /dist /dist
RUN python -m venv /opt/forewarn \
    && wheel="$(find /dist -name 'forewarn-*.whl')" \
    && /opt/forewarn/bin/pip install --no-cache-dir "${wheel}${FOREWARN_EXTRAS:+[${FOREWARN_EXTRAS}]}" \
    && rm -rf /dist

USER 10001:10001
WORKDIR /var/lib/forewarn
# Metrics inside the container; publish it only with metrics_address [::]:9464 (every
# address, IPv6 and IPv4) and allow_remote true, in a mounted file or FOREWARN_* variables.
EXPOSE 9464
# `forewarn status` finds the agent as the agent itself is configured (FOREWARN_* variables,
# FOREWARN_CONFIG or /etc/forewarn/forewarn.toml), metrics on or off; its --timeout stays
# below the check's own, so a hung agent gets status's one-line answer, not a killed check.
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD ["forewarn", "status", "--timeout", "5s"]
ENTRYPOINT ["forewarn", "agent"]
