#!/usr/bin/env bash
# Installs the Debian 12 packages that building and testing pagedhybrid need, and only those
# that are missing. Says what it installs. Safe to run repeatedly: it does nothing when all are
# present. Needs root (or sudo) only when something is missing.
#
#   scripts/install-deps.sh          # build + test dependencies
#   scripts/install-deps.sh --check  # only report what is missing; exit 1 if anything is
set -euo pipefail

# package            why
PACKAGES=(
  gcc                # C11 compiler for the release build
  make
  binutils           # ld -r and objcopy make the installed static library (docs/embedding.md)
  cmake              # build system (>= 3.20)
  pkg-config         # finds jansson
  libjansson-dev     # JSON: config.json, safetensors headers, genai_config.json (docs/dependencies.md)
  libprotobuf-c-dev  # ONNX protobuf runtime (docs/dependencies.md)
  protobuf-c-compiler # protoc-c: generates the C code from onnx.proto at build time
  libonnx-dev        # ships /usr/include/onnx/onnx.proto
  libpcre2-dev       # tokenizer: the checkpoint's Unicode-property pre-tokenizer regex (docs/tokenizer.md)
  libutf8proc-dev    # tokenizer: Unicode normalization (NFC) (docs/tokenizer.md)
  libmicrohttpd-dev  # `pagedhybrid serve`: the HTTP server (docs/serve.md)
  curl               # test_serve drives the server as a user does (docs/serve.md)
  clang              # sanitizer build (ASan+UBSan) and libFuzzer targets
  libclang-rt-14-dev # clang's sanitizer and libFuzzer runtimes
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "${1:-}" = "--check" ]; then
  echo "missing Debian packages: ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing missing Debian packages: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: not root and no sudo; install these yourself: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
