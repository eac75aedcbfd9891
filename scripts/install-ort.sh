#!/usr/bin/env bash
# Installs ONNX Runtime for the cross-check test (tests/test_ort.c, docs/ort-check.md): the npm
# package onnxruntime-node, pinned to 1.30.0 by tests/ort/package-lock.json, into
# tests/ort/node_modules. Says what it does. Safe to run repeatedly: nothing is done when the
# pinned version is already there.
#
# node and npm: the machine's own when both are on PATH, else Debian's nodejs + npm (apt, root or
# sudo). npm runs with --ignore-scripts: onnxruntime-node's postinstall script only downloads
# CUDA binaries from outside the npm registry, and the CPU runtime ships in the package itself
# (../shared/spec/ort-1.30.md).
#
#   scripts/install-ort.sh
set -euo pipefail
cd "$(dirname "$0")/../tests/ort"

WANT=1.30.0

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "install-ort: node/npm not found; installing Debian packages: nodejs npm"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
      echo "install-ort: not root and no sudo; install nodejs and npm yourself" >&2
      exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi

# The installed version, read from the package's own package.json ("" when absent).
have=""
if [ -f node_modules/onnxruntime-node/package.json ]; then
  have=$(node -p 'require("./node_modules/onnxruntime-node/package.json").version' 2>/dev/null || true)
fi

if [ "$have" = "$WANT" ]; then
  echo "install-ort: onnxruntime-node $WANT present in tests/ort/node_modules"
  exit 0
fi

echo "install-ort: onnxruntime-node ${have:-absent}, want $WANT: npm ci in tests/ort (node $(node --version))"
npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
have=$(node -p 'require("./node_modules/onnxruntime-node/package.json").version')
if [ "$have" != "$WANT" ]; then
  echo "install-ort: npm ci installed onnxruntime-node $have, not $WANT (check package-lock.json)" >&2
  exit 1
fi
echo "install-ort: onnxruntime-node $have installed in tests/ort/node_modules"
