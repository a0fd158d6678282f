# syntax=docker/dockerfile:1
# The etcd members of docker-compose.yml, from Debian's packages: the same
# etcd as scripts/stack.sh runs. Bitnami's versioned etcd tags, which the
# compose file used, were withdrawn in 2025 (their legacy copies get no
# updates). etcd reads its settings from the ETCD_* variables the compose
# file sets.
FROM debian:12-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends etcd-server etcd-client \
    && rm -rf /var/lib/apt/lists/*
ENV ETCDCTL_API=3
EXPOSE 2379 2380
ENTRYPOINT ["etcd"]
