# poolguard container image: a static (musl) release binary on distroless, running as 65532.
#
#   docker build -t poolguard:0.1.0 .
#
# Build stage: the official Rust image on Alpine, where musl is the native C library, so ring's
# and psm's C/assembly parts compile with the stock gcc and the binary links statically. The
# shipped binary is stripped (~17 MB instead of ~98 MB with the release profile's line tables).
# integration/image/build.sh follows this file to build the same image without Docker.
ARG RUST_VERSION=1.95
FROM docker.io/library/rust:${RUST_VERSION}-alpine AS build
RUN apk add --no-cache musl-dev gcc
WORKDIR /src
# The whole workspace (its members live in integration/ and bench/); .dockerignore keeps target/,
# certs/ and .git out of the context.
COPY . .
RUN rustup target add x86_64-unknown-linux-musl \
 && cargo build --locked --release --target x86_64-unknown-linux-musl -p poolguard --bin poolguard \
 && cp target/x86_64-unknown-linux-musl/release/poolguard /poolguard \
 && strip /poolguard \
 && /poolguard --version

# Runtime stage: no shell, no package manager; CA certificates and a nonroot user (65532) only.
FROM gcr.io/distroless/static:nonroot
COPY --from=build /poolguard /usr/local/bin/poolguard
# Default policies; the Helm chart mounts its policies ConfigMap over this directory.
COPY policies/ /policies/
USER 65532:65532
EXPOSE 8443 9090
ENTRYPOINT ["/usr/local/bin/poolguard"]
CMD ["serve", "--tls-cert-file", "/tls/tls.crt", "--tls-key-file", "/tls/tls.key", "--policies-dir", "/policies", "--log-format", "json"]
