# syntax=docker/dockerfile:1
# Stockguard service image: `docker compose up` builds it for the three
# service instances of docker-compose.yml.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a code change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
# The build context has no .git: the version and commit come as arguments
# (docker build --build-arg VERSION=$(git describe --tags --always) ...).
ARG VERSION=devel
ARG COMMIT=unknown
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false \
        -ldflags="-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
        -o /out/stockguard ./cmd/stockguard

# debian-slim rather than distroless: the compose healthcheck needs curl.
FROM debian:12-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin stockguard
COPY --from=build /out/stockguard /usr/local/bin/stockguard
USER 10001:10001
ENV STOCKGUARD_ADDR=0.0.0.0:8080
EXPOSE 8080
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=5 \
    CMD curl -fsS -o /dev/null http://127.0.0.1:8080/readyz || exit 1
ENTRYPOINT ["/usr/local/bin/stockguard"]
CMD ["serve"]
