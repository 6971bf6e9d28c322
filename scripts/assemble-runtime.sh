#!/usr/bin/env bash
# The runtime file tree of the deltatune image, used by deploy/Dockerfile and by CI's image test
# (tests/deploy/image_test.sh) alike.
#
#   scripts/assemble-runtime.sh tree DEST BASE_LIBS
#     DEST/usr/local/bin/{deltatuned,deltatune} (from BUILD_DIR, default build/, debug info
#     stripped), every shared library they link that the base image does not provide in
#     DEST/usr/local/lib/deltatune (resolved as ldd resolves it, the soname as the file name),
#     DEST/etc/ld.so.conf.d/deltatune.conf naming that folder, and the default config
#     DEST/etc/deltatune/daemon.yaml (deploy/image/daemon.yaml). BASE_LIBS is the base image's
#     `ldconfig -p`: a library whose soname is listed there is the base's to provide.
#   scripts/assemble-runtime.sh finish ROOT
#     Inside the image's root (chroot when ROOT is not /): refreshes the loader cache and adds the
#     unprivileged user deltatune (uid and gid 10001) owning /var/lib/deltatune.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "assemble-runtime: $*" >&2; exit 2; }

# The libraries `binary` loads, one "soname path" per line; a missing one is an error.
linked_libraries() {
  local out
  out=$(ldd "$1") || die "ldd $1 failed"
  if grep -q "not found" <<<"$out"; then
    die "$1 links libraries this machine cannot resolve: $(grep 'not found' <<<"$out" | xargs)"
  fi
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' <<<"$out"
}

tree() {
  local dest=$1 base_libs=$2 build=${BUILD_DIR:-build}
  [[ -r $base_libs ]] || die "no base library list at $base_libs (the base image's ldconfig -p)"
  for b in deltatuned deltatune; do
    [[ -x $build/daemon/$b ]] || die "$build/daemon/$b is not built (scripts/build.sh)"
  done
  mkdir -p "$dest/usr/local/bin" "$dest/usr/local/lib/deltatune" "$dest/etc/ld.so.conf.d" \
    "$dest/etc/deltatune"
  local provided
  provided=$(awk '/=>/ && $2 != "(libc6)" {print $1}' "$base_libs" | sort -u)  # not 32-bit
  local copied=0 skipped=0
  declare -A seen=()
  for b in deltatuned deltatune; do
    strip --strip-debug -o "$dest/usr/local/bin/$b" "$build/daemon/$b"
    local libs
    libs=$(linked_libraries "$build/daemon/$b")
    while read -r soname path; do
      [[ -n ${seen[$soname]:-} ]] && continue
      seen[$soname]=1
      if grep -qxF "$soname" <<<"$provided"; then
        skipped=$((skipped + 1))
        continue
      fi
      cp -L "$path" "$dest/usr/local/lib/deltatune/$soname"
      copied=$((copied + 1))
    done <<<"$libs"
  done
  echo /usr/local/lib/deltatune >"$dest/etc/ld.so.conf.d/deltatune.conf"
  cp deploy/image/daemon.yaml "$dest/etc/deltatune/daemon.yaml"
  echo "assemble-runtime: 2 binaries, $copied libraries copied, $skipped the base provides"
}

finish() {
  local root=$1
  local run=()
  [[ $(realpath "$root") == / ]] || run=(chroot "$root")
  "${run[@]}" ldconfig
  "${run[@]}" sh -c 'getent group deltatune >/dev/null || groupadd --gid 10001 deltatune
    getent passwd deltatune >/dev/null ||
      useradd --uid 10001 --gid 10001 --no-create-home --home-dir /var/lib/deltatune \
        --shell /usr/sbin/nologin deltatune
    mkdir -p /var/lib/deltatune && chown 10001:10001 /var/lib/deltatune'
  # Every library the binaries need must now resolve inside the root.
  for b in deltatuned deltatune; do
    if "${run[@]}" ldd "/usr/local/bin/$b" | grep "not found"; then
      die "/usr/local/bin/$b does not load in $root"
    fi
  done
}

case ${1:-} in
  tree) [[ $# == 3 ]] || die "usage: $0 tree DEST BASE_LIBS"; tree "$2" "$3" ;;
  finish) [[ $# == 2 ]] || die "usage: $0 finish ROOT"; finish "$2" ;;
  *) die "usage: $0 tree DEST BASE_LIBS | finish ROOT" ;;
esac
