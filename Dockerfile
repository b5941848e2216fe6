# kshare: a Kafka-protocol broker built around share groups.
#
#   docker build -t kshare .                 the broker (last stage, "runtime")
#   docker build --target dev -t kshare-dev .  the same plus the test suite and its dependencies
#
# The broker listens on 0.0.0.0:9092 and keeps its data in the /data volume. Clients reach it
# through the address it advertises: set KSHARE_ADVERTISED_LISTENERS to how they see it
# (default PLAINTEXT://localhost:9092, right for `docker run -p 9092:9092`).

FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid 10001 kshare \
 && useradd --system --uid 10001 --gid kshare --no-create-home --shell /usr/sbin/nologin kshare
WORKDIR /app
COPY . /app

# Test image for docker-compose's e2e service: runs the end-to-end tests against the broker
# named by KSHARE_BOOTSTRAP (tests that need a private broker skip themselves).
FROM base AS dev
RUN pip install '.[dev]' && chown -R kshare:kshare /app
USER kshare
ENV KSHARE_BOOTSTRAP=broker:9092
CMD ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "e2e"]

FROM base AS runtime
RUN pip install . && mkdir -p /data && chown kshare:kshare /data
USER kshare
VOLUME ["/data"]
EXPOSE 9092
ENV KSHARE_ADVERTISED_LISTENERS=PLAINTEXT://localhost:9092
# Healthy = answers ApiVersions v0 (correlation id 1, error code 0) on port 9092.
HEALTHCHECK --interval=5s --timeout=3s --start-period=30s --retries=5 \
    CMD python -c "import socket, struct; s = socket.create_connection(('127.0.0.1', 9092), 2); s.sendall(struct.pack('>ihhih', 10, 18, 0, 1, -1)); assert struct.unpack('>iih', s.makefile('rb').read(10))[1:] == (1, 0)"
# exec: the broker is PID 1 and gets docker stop's SIGTERM (graceful shutdown).
CMD exec kshare-broker --host 0.0.0.0 --port 9092 --data-dir /data --override "advertised.listeners=${KSHARE_ADVERTISED_LISTENERS}"
