# syntax=docker/dockerfile:1
# Builds the operator and runtime images from this workspace, with the same cargo invocation CI uses.
#   docker build --target operator -t streamjob/operator:0.1.0 .
#   docker build --target runtime  -t streamjob/runtime:0.1.0 .

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked -p streamjob-operator -p streamjob-runtime \
 && mkdir -p /out \
 && cp target/dist/streamjob-operator target/dist/streamjob-runtime /out/

# Minimal, non-root final stages: glibc + CA certificates only, no shell. Each image holds one
# binary, built with the `dist` profile (release, no debug info, symbols stripped), at
# /usr/local/bin, run as 65532:65532; the runtime writes only to /tmp (an emptyDir the operator
# mounts, as its root file system is read-only).
FROM gcr.io/distroless/cc-debian12:nonroot AS operator
COPY --from=build /out/streamjob-operator /usr/local/bin/streamjob-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/streamjob-operator"]
CMD ["run"]

FROM gcr.io/distroless/cc-debian12:nonroot AS runtime
COPY --from=build /out/streamjob-runtime /usr/local/bin/streamjob-runtime
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/streamjob-runtime"]
