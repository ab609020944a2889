# syntax=docker/dockerfile:1
# Builds the operator and runtime images from this workspace, with the same cargo invocation CI uses.
#   docker build --target operator -t streamjob/operator:0.1.0 .
#   docker build --target runtime  -t streamjob/runtime:0.1.0 .

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p streamjob-operator -p streamjob-runtime \
 && mkdir -p /out \
 && cp target/release/streamjob-operator target/release/streamjob-runtime /out/

# Minimal, non-root final stages: glibc + CA certificates only, no shell.
FROM gcr.io/distroless/cc-debian12:nonroot AS operator
COPY --from=build /out/streamjob-operator /usr/local/bin/streamjob-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/streamjob-operator"]
CMD ["run"]

FROM gcr.io/distroless/cc-debian12:nonroot AS runtime
COPY --from=build /out/streamjob-runtime /usr/local/bin/streamjob-runtime
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/streamjob-runtime"]
