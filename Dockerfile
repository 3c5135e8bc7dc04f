# The kite base image: the kite binary on distroless, running as nonroot.
#
#   make image            # ghcr.io/kite-dev/kite:VERSION, VERSION from Cargo.toml
#
# Releases are built by .github/workflows/release.yml (multi-arch, signed, with an SBOM).
#
# Controller images are built on top of it from the Dockerfile that
# `kite kube gen-controller-artifacts --dockerfile` prints (save it beside the script as
# Dockerfile.controller).

FROM rust:1.95-bookworm AS build
WORKDIR /src
# The release profile keeps line tables for local profiling; the image drops them but
# keeps the symbol table, so backtraces still name functions.
ENV CARGO_PROFILE_RELEASE_STRIP=debuginfo

# Dependencies first, against stub sources, so that editing src/ reuses this layer.
# Every target Cargo.toml declares needs a file, or cargo refuses the manifest.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src benches/controllers benches/operator \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && echo 'fn main() {}' > benches/controllers/main.rs \
 && echo 'fn main() {}' > benches/operator/main.rs \
 && cargo build --release --locked --bin kite \
 && rm -rf src

COPY src/ src/
# COPY keeps the context's modification times, which can be older than the stub build:
# touching the crate roots makes cargo rebuild kite instead of shipping the stub, and
# `kite version` proves it did (the stub prints nothing).
RUN touch src/lib.rs src/main.rs \
 && cargo build --release --locked --bin kite \
 && /src/target/release/kite version | grep '^kite '

# glibc and libgcc for the Rust binary; TLS is rustls, so no OpenSSL is needed.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.source="https://github.com/kite-dev/kite" \
      org.opencontainers.image.description="Kubernetes controllers written as Starlark scripts" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /src/target/release/kite /usr/local/bin/kite
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/kite"]
CMD ["--help"]
