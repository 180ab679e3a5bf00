#!/usr/bin/env bash
# Make the real Honcho server runnable here, for memoryd's tests and `bxctl up --honcho`:
# pgvector built into Debian's PostgreSQL 15, Honcho's own venv made from its uv.lock (never
# the project's venv), and the two tokenizer files Honcho would download at import, made from
# the npm package tiktoken. Everything is cached under ~/.cache/boxmaker, keyed by the sources,
# so a second run takes a second. Honcho is AGPL third-party code: it is run from a copy in the
# cache, never copied into this project (docs/decisions/honcho-in-tests.md).
#
#   scripts/honcho-server.sh    # prints the Honcho directory (app/, app/.venv, tiktoken/)
#
# The sources come from ../shared/reference/ beside the checkout (BOXMAKER_REFERENCE overrides).
set -euo pipefail
cd "$(dirname "$0")/.."

REFERENCE="${BOXMAKER_REFERENCE:-$(pwd)/../shared/reference}"
HONCHO_SRC="$REFERENCE/honcho-server"
PGVECTOR_SRC="$REFERENCE/pgvector"
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PGVECTOR_VERSION=0.8.6
TIKTOKEN_NPM_VERSION=1.0.22
CACHE="${BOXMAKER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/boxmaker}"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"

log() { echo "honcho-server.sh: $*" >&2; }

if [ ! -f "$HONCHO_SRC/uv.lock" ] || [ ! -f "$PGVECTOR_SRC/vector.control" ]; then
  log "no Honcho or pgvector source under $REFERENCE"; exit 1
fi

install_postgres() {
  local pkg missing=()
  for pkg in postgresql-15 postgresql-server-dev-15 make; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return
  log "installing apt packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >&2
}

# pgvector's files go where Debian's PostgreSQL looks for extensions (PostgreSQL 15 has no
# other place for a control file), so `make install` needs root; the build itself is a copy
# of the read-only source under the cache.
install_pgvector() {
  local sharedir pkglibdir build
  sharedir="$("$PG_CONFIG" --sharedir)"; pkglibdir="$("$PG_CONFIG" --pkglibdir)"
  if [ -f "$sharedir/extension/vector--$PGVECTOR_VERSION.sql" ] && [ -f "$pkglibdir/vector.so" ]; then
    return
  fi
  build="$CACHE/pgvector-$PGVECTOR_VERSION-build"
  log "building pgvector $PGVECTOR_VERSION in $build"
  rm -rf "$build"; mkdir -p "$build"
  cp -r "$PGVECTOR_SRC/." "$build/"
  chmod -R u+w "$build"
  # OPTFLAGS="": the default -march=native is not portable and not needed for tests.
  make -s -C "$build" PG_CONFIG="$PG_CONFIG" OPTFLAGS="" >&2
  $SUDO make -s -C "$build" PG_CONFIG="$PG_CONFIG" OPTFLAGS="" install >&2
}

honcho_dir() {
  local key version
  key="$(cat "$HONCHO_SRC/uv.lock" "$HONCHO_SRC/pyproject.toml" | sha256sum | cut -c1-12)"
  version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$HONCHO_SRC/pyproject.toml" | head -n 1)"
  echo "$CACHE/honcho-server-$version-$key"
}

# The venv's scripts name their interpreter by absolute path, so it is made where it stays; a
# directory without the .complete marker is a build that did not finish and is made again.
install_honcho() {
  local dir="$1"
  [ -f "$dir/.complete" ] && return
  rm -rf "$dir"; mkdir -p "$dir/app"
  log "copying Honcho to $dir/app and installing its dependencies from its uv.lock"
  cp -r "$HONCHO_SRC/." "$dir/app/"
  chmod -R u+w "$dir/app"
  (cd "$dir/app" && env -u VIRTUAL_ENV UV_PROJECT_ENVIRONMENT="$dir/app/.venv" \
    uv sync --frozen --no-dev --quiet >&2)
  make_tokenizers "$dir"
  touch "$dir/.complete"
}

# tiktoken reads an encoding from $TIKTOKEN_CACHE_DIR/<sha1 of its URL> and checks its sha256
# against the hash it pins; the npm package ships the same ranks as JSON (see SOURCE.md).
make_tokenizers() {
  local dir="$1" npm_dir="$CACHE/npm-tiktoken-$TIKTOKEN_NPM_VERSION"
  if [ ! -f "$npm_dir/node_modules/tiktoken/encoders/o200k_base.json" ]; then
    mkdir -p "$npm_dir"
    echo '{"private": true}' > "$npm_dir/package.json"
    (cd "$npm_dir" && npm install --no-audit --no-fund --loglevel=error \
      "tiktoken@$TIKTOKEN_NPM_VERSION" >&2)
  fi
  mkdir -p "$dir/tiktoken"
  "$dir/app/.venv/bin/python" - "$npm_dir/node_modules/tiktoken/encoders" "$dir/tiktoken" <<'EOF'
import hashlib, inspect, json, sys
from pathlib import Path
from tiktoken_ext import openai_public as official
encoders, out = Path(sys.argv[1]), Path(sys.argv[2])
for name, constructor in (("cl100k_base", official.cl100k_base),
                          ("o200k_base", official.o200k_base)):
    url = f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
    lines = []
    for line in json.loads((encoders / f"{name}.json").read_text())["bpe_ranks"].split("\n"):
        if not line:
            continue
        _marker, first, *tokens = line.split(" ")
        lines += [f"{token} {int(first) + i}\n" for i, token in enumerate(tokens)]
    data = "".join(lines).encode()
    pinned = inspect.getsource(constructor).split('expected_hash="')[1].split('"')[0]
    if hashlib.sha256(data).hexdigest() != pinned:
        sys.exit(f"{name}: made from npm tiktoken, sha256 differs from tiktoken's pin {pinned}")
    (out / hashlib.sha1(url.encode()).hexdigest()).write_bytes(data)
EOF
}

# Bytecode for Honcho and its venv, once: where PYTHONDONTWRITEBYTECODE is set no import writes
# it, and each start of Honcho's server and deriver compiled some 9,000 modules from source
# again (3.4 CPU-s an import of its app, 1.4 with bytecode: docs/decisions/suite-time.md).
compile_honcho() {
  local dir="$1"
  [ -f "$dir/.compiled" ] && return
  "$dir/app/.venv/bin/python" -m compileall -q -j 0 "$dir/app" >&2
  touch "$dir/.compiled"
}

mkdir -p "$CACHE"
exec 9>"$CACHE/.honcho.lock"
flock 9
install_postgres
install_pgvector
dir="$(honcho_dir)"
install_honcho "$dir"
compile_honcho "$dir"
echo "$dir"
