# syntax=docker/dockerfile:1
# Builds the operator and runtime images from this workspace, with the same cargo invocation CI uses.
#   docker build --target operator -t streamjob/operator:0.1.0 .
#   docker build --target runtime  -t streamjob/runtime:0.1.0 .
#
# Two build arguments, both defaulting to the public build above:
#   BASE_IMAGE  the final stages' base (glibc + CA certificates, a nonroot user 65532).
#   BINARIES    where the binaries come from: `build` (cargo, in the stage below) or `prebuilt`
#               (copied from the folder PREBUILT_DIR of the build context, default `prebuilt/`,
#               holding streamjob-operator and/or streamjob-runtime). Only the selected stage is
#               built (BuildKit and buildah skip unused stages, so the other's base is never pulled).
#               buildah/podman before 1.29 (Debian 12's 1.28) ignore the default when a FROM names a
#               stage through an ARG: pass --build-arg BINARIES=build explicitly there.
# e2e/scripts/build-images.sh uses both for offline images of binaries cargo built once:
#   buildah build --target runtime --build-arg BASE_IMAGE=docker.io/streamjob/base-cc:debian12 \
#     --build-arg BINARIES=prebuilt -f Dockerfile <folder with prebuilt/streamjob-runtime>
ARG BASE_IMAGE=gcr.io/distroless/cc-debian12:nonroot
ARG BINARIES=build
ARG CHECKER_BASE_IMAGE=busybox:1.37
ARG CHECKER_FILES=flink-checker-build

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked -p streamjob-operator -p streamjob-runtime \
 && mkdir -p /out \
 && cp target/dist/streamjob-operator target/dist/streamjob-runtime /out/

FROM scratch AS prebuilt
ARG PREBUILT_DIR=prebuilt
COPY ${PREBUILT_DIR}/ /out/

FROM ${BINARIES} AS binaries

# Minimal, non-root final stages: glibc + CA certificates only, no shell. Each image holds one
# binary, built with the `dist` profile (release, no debug info, symbols stripped), at
# /usr/local/bin, run as 65532:65532; the runtime writes only to /tmp (an emptyDir the operator
# mounts, as its root file system is read-only).
FROM ${BASE_IMAGE} AS operator
COPY --from=binaries /out/streamjob-operator /usr/local/bin/streamjob-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/streamjob-operator"]
CMD ["run"]

FROM ${BASE_IMAGE} AS runtime
COPY --from=binaries /out/streamjob-runtime /usr/local/bin/streamjob-runtime
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/streamjob-runtime"]

# The Flink savepoint pre-check (flink/checker), compiled per supported Flink minor against that
# version's jars (tools/flink/pom.xml, the versions install.sh tests), one folder per minor:
# /opt/streamjob/flink-checker/<major.minor>/{flink-check, streamjob-flink-checker.jar,
# flink-state-processor-api-<v>.jar}. The Flink engine's check and dispose pods copy the folder of
# their target minor into an emptyDir with an init container (`cp`, hence busybox).
#   docker build --target flink-checker -t streamjob/flink-checker:0.1.0 .
FROM maven:3.9-eclipse-temurin-17 AS flink-checker-build
WORKDIR /src
COPY tools/flink tools/flink
COPY flink flink
RUN for v in 1.20.0 2.3.0; do \
      mvn -q -f tools/flink/pom.xml -Dflink.version=$v dependency:copy-dependencies -DoutputDirectory=/flink-$v/lib \
   && touch /flink-$v/lib/.complete \
   && bash flink/build.sh /flink-$v \
   && mkdir -p /out/${v%.*} && cp -R /flink-$v/checker/. /out/${v%.*}/ ; \
    done

# What goes into the image: built above (CHECKER_FILES=flink-checker-build, the default) or the
# folder prebuilt-checker/<major.minor>/ of the build context (CHECKER_FILES=flink-checker-prebuilt,
# what e2e/scripts/build-images.sh passes, with CHECKER_BASE_IMAGE=its JRE image: any base with cp).
FROM scratch AS flink-checker-prebuilt
COPY prebuilt-checker /out
FROM ${CHECKER_FILES} AS flink-checker-files
FROM ${CHECKER_BASE_IMAGE} AS flink-checker
COPY --from=flink-checker-files /out /opt/streamjob/flink-checker
USER 65532:65532
