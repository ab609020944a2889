# Part of e2e/scripts/build-images.sh, which sources it (it uses that script's pins, bh,
# stamp_hit, export_archive, derived_image, record, ...; never run alone): the Flink images.
#   streamjob/jre:17-debian12         Debian 12 minbase + openjdk-17-jre-headless, every package pinned
#   streamjob/flink:<version>         flink/image/Dockerfile on it, per supported version
#   streamjob/flink-testjob[-v2]:<v>  flink/testjob/Dockerfile FROM that image; :<v>-r2 a relabel
#   streamjob/flink-checker:e2e       the Dockerfile's flink-checker target, every version's checker

# build_jre FILE KEY LOG : Debian's minbase plus the JRE, exactly the pinned packages
build_jre() {
  local file="$1" key="$2" logf="$3" dir="$WORK/jre/rootfs" rootfs="$WORK/jre/rootfs.tar" pins
  mkdir -p "$WORK/jre"
  pins="$(grep -v '^#' "$REPO/$JRE_PINS" | LC_ALL=C sort)"
  log "jre: mmdebstrap $DEBIAN_SUITE minbase + openjdk-17-jre-headless ($(wc -l <<<"$pins") pinned packages)"
  # the host's network namespace (the mirror), a private mount namespace; documentation left out
  # as Debian's slim images do (the JRE's postinst still needs /usr/share/man/man1 for its
  # alternatives' manual links)
  run_logged "$logf" unshare --mount --propagation private \
    env TMPDIR="$WORK/jre" SOURCE_DATE_EPOCH="$BUILD_EPOCH" PATH="$NODE_ROOT/usr/bin:$PATH" \
    perl "$MMDEBSTRAP" --variant=minbase --mode=root --format=directory --skip=output/dev \
      --aptopt='APT::Sandbox::User "root"' --aptopt='Acquire::Retries "3"' \
      --aptopt='APT::Install-Recommends "false"' \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --include="$(tr '\n' ',' <<<"$pins")" \
      --essential-hook='mkdir -p "$1/usr/share/man/man1"' \
      --customize-hook="chroot \"\$1\" dpkg-query -W -f '\${Package}=\${Version}\n' | LC_ALL=C sort >'$WORK/jre/installed'" \
      "$DEBIAN_SUITE" "$dir" "${DEBIAN_MIRRORS[@]}"
  if [ "$(cat "$WORK/jre/installed")" != "$pins" ]; then
    log "FAILED: the installed packages differ from $JRE_PINS:"
    diff <(echo "$pins") "$WORK/jre/installed" >&2 || true
    return 1
  fi
  rm -f "$dir"/etc/resolv.conf "$dir"/etc/hostname "$dir"/etc/hosts
  find "$dir"/dev -mindepth 1 -delete
  run_logged "$logf" tar --create --file "$rootfs" --directory "$dir" --sort=name --numeric-owner \
    --mtime="@$BUILD_EPOCH" --format=pax --pax-option=delete=atime,delete=ctime --one-file-system .
  log "jre: rootfs $(du -sh --apparent-size "$dir" | cut -f1); committing $JRE_IMAGE"
  local ctr
  ctr="$(bh from "${POLICY[@]}" --pull=never scratch 2>>"$logf")" || { tail -n 30 "$logf" >&2; return 1; }
  run_logged "$logf" bh add "$ctr" "$rootfs" /
  run_logged "$logf" bh config --os linux --arch amd64 \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 --env LANG=C.UTF-8 \
    --label "org.opencontainers.image.description=Debian 12 minbase with OpenJDK 17 JRE (headless), built by e2e/scripts/build-images.sh" \
    --label "streamjob.e2e/inputs=$key" --created-by "e2e/scripts/build-images.sh $JRE_RECIPE" "$ctr"
  run_logged "$logf" bh commit "${POLICY[@]}" --format docker --timestamp "$BUILD_EPOCH" --rm "$ctr" "$JRE_IMAGE"
  # smoke test: the JVM starts as a non-root user (it needs /proc)
  ctr="$(bh from "${POLICY[@]}" --pull=never "$JRE_IMAGE" 2>>"$logf")" || { tail -n 30 "$logf" >&2; return 1; }
  local root out
  root="$(bh mount "$ctr" 2>>"$logf")" || { tail -n 30 "$logf" >&2; return 1; }
  out="$(unshare --net --mount --pid --fork --propagation private \
           sh -c 'mount -t proc proc "$1/proc" && chroot --userspec=9999:9999 "$1" /usr/lib/jvm/java-17-openjdk-amd64/bin/java -version 2>&1' _ "$root" \
           2>>"$logf" | head -n 1)" || { log "FAILED: java -version in $JRE_IMAGE"; return 1; }
  bh rm "$ctr" >/dev/null
  log "jre: smoke test as 9999: $out"
  export_archive "$JRE_IMAGE" "$file" "$key" "$logf"
}

JRE_FILE="$IMAGES/$(archive_name "$JRE_IMAGE").tar"
JRE_LOG="$CACHE/logs/images-$(archive_name "$JRE_IMAGE").log"
JRE_KEY="$( { echo "$JRE_RECIPE $BUILD_EPOCH $DEBIAN_SUITE $JRE_IMAGE"; printf '%s\n' "${DEBIAN_MIRRORS[@]}"
  cat "$REPO/$JRE_PINS"; declare -f build_jre; sha256 "$MMDEBSTRAP"; } | sha256sum | cut -c1-32)"
t0=$(now_ms)
if stamp_hit "$JRE_FILE" "$JRE_KEY"; then
  log "jre: cached ($JRE_FILE)"
  record "$JRE_IMAGE" "$JRE_FILE" cached "$t0"
else
  : >"$JRE_LOG"
  STEP="jre image (log: $JRE_LOG)"
  build_jre "$JRE_FILE" "$JRE_KEY" "$JRE_LOG"
  record "$JRE_IMAGE" "$JRE_FILE" built "$t0"
fi

# context_image IMAGE DOCKERFILE CTX LOG FILE KEY T0 [BUILD_ARG=V | --target=STAGE]... :
# DOCKERFILE built in the prepared context CTX, its FROM images built above
context_image() {
  local image="$1" dockerfile="$2" ctx="$3" logf="$4" file="$5" key="$6" t0="$7"
  shift 7
  local args=() a
  for a in "$@"; do
    case "$a" in
      --target=*) args+=(--target "${a#--target=}") ;;
      *) args+=(--build-arg "$a") ;;
    esac
  done
  : >"$logf"
  STEP="$image (log: $logf)"
  ensure_in_storage "$JRE_IMAGE" "$JRE_FILE" "$logf"
  run_logged "$logf" bh build "${POLICY[@]}" --isolation chroot --pull=never \
    --format docker --timestamp "$BUILD_EPOCH" --layers=false --rm "${args[@]}" \
    --label "streamjob.e2e/inputs=$key" -f "$dockerfile" -t "$image" "$ctx"
  if grep -qE 'maven:3.9|rust:1.95|eclipse-temurin|busybox' "$logf"; then
    log "FAILED: buildah touched a public base image; see $logf"; return 1
  fi
  export_archive "$image" "$file" "$key" "$logf"
  record "$image" "$file" built "$t0"
}

# tree_key DIR... : names and sizes of every file (Maven artifacts never change under a version)
tree_key() { find "$@" -type f -printf '%P %s\n' | LC_ALL=C sort | sha256sum | cut -c1-32; }

FLINK_DOCKERFILE="$REPO/flink/image/Dockerfile"
TESTJOB_DOCKERFILE="$REPO/flink/testjob/Dockerfile"
for FLINK_VERSION in "${FLINK_VERSIONS[@]}"; do
  fdir="$CACHE/bin/flink-$FLINK_VERSION"
  for f in lib/.complete opt/flink-s3-fs-hadoop-$FLINK_VERSION.jar testjob-usrlib testjob-v2-usrlib checker; do
    [ -e "$fdir/$f" ] || die "$fdir/$f missing: run e2e/scripts/install.sh (Flink $FLINK_VERSION)"
  done
  # the base image: /opt/flink as the official image lays it out (no state processor API in lib/:
  # the checker brings its own, as it must on an official image)
  image="docker.io/streamjob/flink:$FLINK_VERSION"
  name="$(archive_name "$image")"
  t0=$(now_ms)
  key="$( { echo "$APP_RECIPE $BUILD_EPOCH $image $JRE_KEY"; sha256 "$FLINK_DOCKERFILE"
    cat "$REPO/flink/image/docker-entrypoint.sh" "$REPO"/flink/image/conf/*
    tree_key "$fdir/lib" "$fdir/plugins/metrics-prometheus" "$fdir/opt"; declare -f context_image; } | sha256sum | cut -c1-32)"
  if stamp_hit "$IMAGES/$name.tar" "$key"; then
    log "$name: cached"; record "$image" "$IMAGES/$name.tar" cached "$t0"
  else
    ctx="$WORK/$name"
    mkdir -p "$ctx/flink/lib" "$ctx/flink/plugins" "$ctx/flink/opt" "$ctx/flink/log" "$ctx/flink/usrlib"
    find "$fdir/lib" -maxdepth 1 -name '*.jar' ! -name 'flink-state-processor-api-*' -exec cp -t "$ctx/flink/lib" {} +
    cp -R "$fdir/plugins/metrics-prometheus" "$ctx/flink/plugins/"
    cp "$fdir"/opt/*.jar "$ctx/flink/opt/"
    cp -R "$REPO/flink/image/conf" "$ctx/flink/conf"
    cp "$REPO/flink/image/docker-entrypoint.sh" "$ctx/"
    context_image "$image" "$FLINK_DOCKERFILE" "$ctx" "$CACHE/logs/images-$name.log" "$IMAGES/$name.tar" "$key" "$t0" \
      BASE_IMAGE="$JRE_IMAGE" FLINK_VERSION="$FLINK_VERSION"
    rm -rf "$ctx"
  fi
  base_key="$key"
  # the test job FROM it, as a Flink user builds an image: the jar in usrlib/
  for entry in "flink-testjob:testjob-usrlib" "flink-testjob-v2:testjob-v2-usrlib"; do
    image="docker.io/streamjob/${entry%%:*}:$FLINK_VERSION"
    name="$(archive_name "$image")"
    t0=$(now_ms)
    key="$( { echo "$APP_RECIPE $BUILD_EPOCH $image $base_key"; sha256 "$TESTJOB_DOCKERFILE"
      sha256 "$fdir/${entry#*:}/streamjob-flink-testjob.jar"; declare -f context_image; } | sha256sum | cut -c1-32)"
    if stamp_hit "$IMAGES/$name.tar" "$key"; then
      log "$name: cached"; record "$image" "$IMAGES/$name.tar" cached "$t0"
    else
      ctx="$WORK/$name"
      mkdir -p "$ctx"
      cp -R "$fdir/${entry#*:}" "$ctx/usrlib"
      context_image "$image" "$TESTJOB_DOCKERFILE" "$ctx" "$CACHE/logs/images-$name.log" "$IMAGES/$name.tar" "$key" "$t0" \
        FLINK_IMAGE="docker.io/streamjob/flink:$FLINK_VERSION"
      rm -rf "$ctx"
    fi
  done
  # a new image of the same job (what an image bump deploys): another image id, the same code
  derived_image "docker.io/streamjob/flink-testjob:$FLINK_VERSION-r2" "docker.io/streamjob/flink-testjob:$FLINK_VERSION" \
    "LABEL dev.streamjob.e2e.revision=2"
done

# the checker of every version, one folder per minor, on the JRE image (the init container's cp)
image="docker.io/streamjob/flink-checker:$APP_TAG"
name="$(archive_name "$image")"
t0=$(now_ms)
key="$( { echo "$APP_RECIPE $BUILD_EPOCH $image $JRE_KEY"; sha256 "$REPO/Dockerfile"
  for v in "${FLINK_VERSIONS[@]}"; do tree_key "$CACHE/bin/flink-$v/checker"; sha256 "$CACHE/bin/flink-$v/checker/streamjob-flink-checker.jar"; done
  declare -f context_image; } | sha256sum | cut -c1-32)"
if stamp_hit "$IMAGES/$name.tar" "$key"; then
  log "$name: cached"; record "$image" "$IMAGES/$name.tar" cached "$t0"
else
  ctx="$WORK/$name"
  for v in "${FLINK_VERSIONS[@]}"; do
    mkdir -p "$ctx/prebuilt-checker/${v%.*}"
    cp -R "$CACHE/bin/flink-$v/checker/." "$ctx/prebuilt-checker/${v%.*}/"
  done
  context_image "$image" "$REPO/Dockerfile" "$ctx" "$CACHE/logs/images-$name.log" "$IMAGES/$name.tar" "$key" "$t0" \
    CHECKER_BASE_IMAGE="$JRE_IMAGE" CHECKER_FILES=flink-checker-prebuilt --target=flink-checker
  rm -rf "$ctx"
fi
