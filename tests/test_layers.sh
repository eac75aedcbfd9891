#!/bin/sh
# test_layers — the module layering of docs/architecture.md, enforced: every #include "<module>/..."
# in a library file of src/<module>/ (tests beside a module are exempt: they may reach across)
# must name the module itself or one it may depend on. A wrong-way include fails `make test`
# naming the file, the line and the rule.
#
# The one allowed upward edge: graph -> ops (graph_finalize resolves each node's op contract and
# calls its infer; the ops do not call back into anything but the graph's types).
set -eu
ROOT=${PH_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}

allowed() { # module -> the modules it may include besides itself
  case "$1" in
  base) echo "" ;;
  tensor) echo "base" ;;
  kernels) echo "base tensor" ;;
  graph) echo "base tensor ops" ;;
  ops) echo "base tensor graph kernels" ;;
  exec) echo "base tensor graph ops" ;;
  io) echo "base tensor graph" ;;
  cache) echo "base tensor" ;;
  models) echo "base tensor graph io" ;;
  runtime) echo "base tensor graph ops exec io cache models" ;;
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
if [ -s "${TMPDIR:-/tmp}/test_layers.$$" ]; then bad=1; fi
rm -f "${TMPDIR:-/tmp}/test_layers.$$"
if [ "$bad" -ne 0 ]; then
  echo "test_layers: the module layering is broken (see above)"
  exit 1
fi
echo "test_layers: $checked library files, every include within the layering"
