#!/bin/sh
# test_layers — the module layering of docs/architecture.md, enforced: every #include "<module>/..."
# in a library file of src/<module>/ (tests beside a module are exempt: they may reach across)
# must name the module itself or one it may depend on. A wrong-way include fails `make test`
# naming the file, the line and the rule. The tools (tools/*.c, *.h) include only the public
# header, src/tools_api.h, their own headers and bench/'s public-API helpers; src/tools_api.h
# includes only the headers listed for it below.
#
# The one allowed upward edge: graph -> ops (graph_finalize resolves each node's op contract and
# calls its infer; the ops do not call back into anything but the graph's types).
set -eu
ROOT=${PH_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}

allowed() { # module -> the modules it may include besides itself
  case "$1" in
  base) echo "" ;;
  text) echo "base" ;;
  tensor) echo "base" ;;
  kernels) echo "base tensor" ;;
  graph) echo "base tensor ops" ;;
  ops) echo "base tensor graph kernels" ;;
  exec) echo "base tensor graph ops" ;;
  io) echo "base tensor graph" ;;
  cache) echo "base tensor" ;;
  models) echo "base tensor graph io" ;;
  runtime) echo "base tensor graph kernels ops exec io cache models" ;;
  engine) echo "base tensor io cache runtime" ;;
  *) echo "UNKNOWN" ;;
  esac
}

bad=0
checked=0
for dir in "$ROOT"/src/*/; do
  m=$(basename "$dir")
  ok=$(allowed "$m")
  if [ "$ok" = UNKNOWN ]; then
    echo "FAIL src/$m: a module test_layers.sh does not know; give it its row (docs/architecture.md)"
    bad=1
    continue
  fi
  for f in "$dir"*.c "$dir"*.h; do
    [ -e "$f" ] || continue
    case "$(basename "$f")" in test_*) continue ;; esac
    checked=$((checked + 1))
    # lines like: #include "engine/scheduler.h"
    grep -n '^#include "[a-z_]*/' "$f" | while IFS= read -r line; do
      n=${line%%:*}
      dep=$(echo "$line" | sed 's/^[0-9]*:#include "\([a-z_]*\)\/.*/\1/')
      [ "$dep" = "$m" ] && continue
      case " $ok " in *" $dep "*) continue ;; esac
      echo "FAIL src/$m/$(basename "$f"):$n includes $dep/: src/$m may include only: ${ok:-nothing}"
      echo x >>"${TMPDIR:-/tmp}/test_layers.$$"
    done
  done
done

# The tools (tools/*.c, *.h) stand where an embedding program stands: they include the public
# header, the one internal header src/tools_api.h, their own tools/ headers (no slash) and the
# header-only helpers of bench/ they share with bench programs. Nothing else of src/.
for f in "$ROOT"/tools/*.c "$ROOT"/tools/*.h; do
  [ -e "$f" ] || continue
  checked=$((checked + 1))
  grep -n '^#include "' "$f" | while IFS= read -r line; do
    n=${line%%:*}
    inc=$(echo "$line" | sed 's/^[0-9]*:#include "\([^"]*\)".*/\1/')
    case "$inc" in
    pagedhybrid.h | tools_api.h) continue ;;
    ../bench/*.h) continue ;;
    */*) ;;
    *) continue ;; # tools/ itself
    esac
    echo "FAIL tools/$(basename "$f"):$n includes $inc: a tool includes only pagedhybrid.h," \
      "tools_api.h and tools/ headers (docs/architecture.md)"
    echo x >>"${TMPDIR:-/tmp}/test_layers.$$"
  done
done
# The bench/ helpers the tools include run over the public API only.
for f in "$ROOT"/bench/*.h; do
  [ -e "$f" ] || continue
  grep -q "$(basename "$f")" "$ROOT"/tools/*.c || continue
  checked=$((checked + 1))
  grep -n '^#include "' "$f" | while IFS= read -r line; do
    n=${line%%:*}
    inc=$(echo "$line" | sed 's/^[0-9]*:#include "\([^"]*\)".*/\1/')
    [ "$inc" = pagedhybrid.h ] && continue
    echo "FAIL bench/$(basename "$f"):$n includes $inc: a bench header the tools include" \
      "includes only pagedhybrid.h"
    echo x >>"${TMPDIR:-/tmp}/test_layers.$$"
  done
done
# src/tools_api.h: exactly what export, inspect, make-tiny, run, bench and generate's dense layout
# need (its comment says who takes what). Never the engine's internals, the paged session, the
# pools, the executor or the ops: the tools serve through ph_engine_*.
TOOLS_API_ALLOWED="base/diag.h base/fmap.h base/wfile.h engine/request_file.h io/genai_config.h
io/inference_metadata.h io/json_util.h io/onnx.h models/export.h models/model.h models/package.h models/tiny.h
pagedhybrid.h runtime/dense_session.h tensor/dtype.h tensor/tensor.h text/tiny_tokenizer.h"
if [ -e "$ROOT/src/tools_api.h" ]; then
  checked=$((checked + 1))
  grep -n '^#include "' "$ROOT/src/tools_api.h" | while IFS= read -r line; do
    n=${line%%:*}
    inc=$(echo "$line" | sed 's/^[0-9]*:#include "\([^"]*\)".*/\1/')
    case " $(echo $TOOLS_API_ALLOWED) " in *" $inc "*) continue ;; esac
    echo "FAIL src/tools_api.h:$n includes $inc: the tools' internal header includes only:" \
      "$(echo $TOOLS_API_ALLOWED)"
    echo x >>"${TMPDIR:-/tmp}/test_layers.$$"
  done
fi
if [ -s "${TMPDIR:-/tmp}/test_layers.$$" ]; then bad=1; fi
rm -f "${TMPDIR:-/tmp}/test_layers.$$"
if [ "$bad" -ne 0 ]; then
  echo "test_layers: the module layering is broken (see above)"
  exit 1
fi
echo "test_layers: $checked library, tool and tool-header files, every include within the layering"
