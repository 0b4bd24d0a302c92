# kvserve container image.
#
#   podman build -t kvserve .        (or docker build; needs no registry
#                                      beyond the two Debian base images)
#   podman run --rm -p 127.0.0.1:50051:50051 -p 127.0.0.1:9464:9464 kvserve
#
# Stage "build" compiles kvserve and kvctl with Debian's -dev packages. The
# runtime stage is bookworm-slim plus only the shared-library packages the two
# binaries link (found with ldd in the build stage), runs as an unprivileged
# user, listens on 0.0.0.0 (gRPC 50051 in plaintext, --insecure: TLS ends in
# front of it; metrics 9464) and keeps sessions in
# /var/lib/kvserve/sessions (a volume). Every flag can be set as an
# environment variable KVSERVE_<FLAG> (e.g. -e KVSERVE_KV_CACHE_BYTES=...).
# SIGTERM drains in-flight streams for --shutdown_grace_seconds, then exits 0.

FROM debian:bookworm AS build
ARG DEBIAN_FRONTEND=noninteractive
# The Makefile's DEPS (tests and benchmarks configure but are not built here;
# openssl, the command the TLS tests make certificates with, is left out),
# plus what libdnnl-dev's CMake config needs (OpenCL headers and library: only
# recommended by the package, so --no-install-recommends leaves them out) and
# ccache for builds that mount a compiler cache.
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends \
      cmake make g++ pkg-config ccache \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
      libabsl-dev libdnnl-dev ocl-icd-opencl-dev opencl-c-headers \
      prometheus-cpp-dev \
      libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev \
      libxxhash-dev libssl-dev libboost-dev zlib1g-dev \
      libpcre2-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# CCACHE_DIR may be a build-time volume (podman build -v DIR:/ccache); without
# one ccache just writes into this layer's /ccache, which is discarded.
ENV CCACHE_DIR=/ccache
ARG JOBS=""
# .git is not copied (.dockerignore): pass the commit for --version and
# kvserve_build_info, e.g. --build-arg KVSERVE_COMMIT=$(git rev-parse
# --short=12 HEAD); without it they say "unknown".
ARG KVSERVE_COMMIT=""
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
      -DKVSERVE_COMMIT="${KVSERVE_COMMIT}" \
 && cmake --build /build -j "${JOBS:-$(nproc)}" --target kvserve kvctl \
 && mkdir -p /out \
 && install -s /build/kvserve /build/kvctl /out/ \
 && for b in /out/kvserve /out/kvctl; do ldd "$b"; done \
    | awk '/=> \//{print $3}' | sort -u \
    | while read -r lib; do dpkg -S "$(readlink -f "$lib")" 2>/dev/null \
        || dpkg -S "/usr$(readlink -f "$lib")"; done \
    | cut -d: -f1 | sort -u > /out/runtime-packages \
 && echo "runtime packages:" $(cat /out/runtime-packages)

FROM debian:bookworm-slim
ARG DEBIAN_FRONTEND=noninteractive
COPY --from=build /out/runtime-packages /tmp/runtime-packages
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends $(cat /tmp/runtime-packages) \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /tmp/runtime-packages \
 && groupadd --system --gid 10001 kvserve \
 && useradd --system --uid 10001 --gid kvserve --home-dir /var/lib/kvserve \
      --no-create-home --shell /usr/sbin/nologin kvserve \
 && mkdir -p /var/lib/kvserve/sessions \
 && chown -R kvserve:kvserve /var/lib/kvserve
COPY --from=build /out/kvserve /out/kvctl /usr/local/bin/

# Plaintext gRPC on 0.0.0.0 needs KVSERVE_INSECURE=1: TLS terminates at the
# router or service mesh in front of the container. To serve TLS from the
# container itself, mount a certificate and set KVSERVE_TLS_CERT and
# KVSERVE_TLS_KEY (then KVSERVE_INSECURE has no effect; the HEALTHCHECK
# below speaks plaintext, so replace it). API keys: KVSERVE_API_KEYS_FILE.
ENV KVSERVE_LISTEN=0.0.0.0:50051 \
    KVSERVE_INSECURE=1 \
    KVSERVE_METRICS_LISTEN=0.0.0.0:9464 \
    KVSERVE_SESSION_DIR=/var/lib/kvserve/sessions
USER 10001:10001
WORKDIR /var/lib/kvserve
VOLUME ["/var/lib/kvserve/sessions"]
EXPOSE 50051 9464
# kvctl health exits 0 only for SERVING (2 s deadline).
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["kvctl", "--addr=127.0.0.1:50051", "health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["kvserve"]
