#!/bin/sh
# test_install — `make install` as an embedding program sees it (docs/embedding.md):
#   1. cmake --install of this build tree into a scratch prefix: header, shared and static
#      library, both .pc files, the CLI;
#   2. the shared library's dynamic symbols and the static archive's global symbols are exactly
#      the ph_* API (the list is the header's PH_API declarations);
#   3. the program in docs/embedding.md, extracted from the doc, builds with one pkg-config line
#      against the shared library and against the static one — the static link together with a
#      file that defines internal names of ours (arena_alloc, engine_create, ...), which must not
#      collide — and both binaries print the same stream: 8 tokens for each of two requests, the
#      greedy one equal to `pagedhybrid generate` on the same prompt, and "length" as the finish
#      reason of both.
# ctest sets PH_BUILD_DIR, PH_SOURCE_DIR, PH_DATA_DIR, PH_TMP_DIR, PH_CLI, CC and PH_CFLAGS (the
# sanitizer flags of this build, which a program linking an instrumented library needs too).
set -u
fails=0
checks=0
fail() { echo "  FAIL: $*" >&2; fails=$((fails + 1)); }
check() { checks=$((checks + 1)); }
die() { echo "  FAIL: $*" >&2; echo "0 passed, 1 failed"; exit 1; }

for v in PH_BUILD_DIR PH_SOURCE_DIR PH_DATA_DIR PH_TMP_DIR PH_CLI CC; do
  eval "val=\${$v:-}"
  [ -n "$val" ] || die "environment variable $v is not set (run through ctest)"
done
command -v pkg-config >/dev/null || die "pkg-config is missing (scripts/install-deps.sh installs it)"
model="$PH_DATA_DIR/golden/qwen35-tiny-f32/checkpoint"
[ -r "$model/config.json" ] || die "test data missing: $model (tests/data/README.md)"

tmp="$PH_TMP_DIR"
prefix="$tmp/prefix"
rm -rf "$tmp" && mkdir -p "$tmp" || die "cannot create $tmp"

# ---- 1. install ---------------------------------------------------------------------------------
cmake --install "$PH_BUILD_DIR" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
  die "cmake --install failed: $(tail -n 3 "$tmp/install.log")"
libdir=$(ls -d "$prefix"/lib* | head -n 1)
for f in include/pagedhybrid.h bin/pagedhybrid; do
  check; [ -f "$prefix/$f" ] || fail "not installed: $f"
done
for f in libpagedhybrid.so libpagedhybrid.a pkgconfig/pagedhybrid.pc pkgconfig/pagedhybrid-static.pc; do
  check; [ -f "$libdir/$f" ] || fail "not installed: $libdir/$f"
done
check; "$prefix/bin/pagedhybrid" --version >/dev/null 2>&1 || fail "the installed CLI does not run"

# ---- 2. symbols ----------------------------------------------------------------------------------
# The API: every function the header declares PH_API (the name before the parameter list).
sed -n 's/^PH_API .*[ *]\(ph_[a-z0-9_]*\)(.*/\1/p' "$PH_SOURCE_DIR/include/pagedhybrid.h" | sort -u >"$tmp/api.txt"
n_api=$(wc -l <"$tmp/api.txt")
check; [ "$n_api" -ge 20 ] || fail "read only $n_api PH_API functions from the header"
nm -D --defined-only "$libdir/libpagedhybrid.so" | awk '$2 ~ /^[A-Z]$/ {print $3}' | sort -u >"$tmp/so.txt"
nm -g --defined-only "$libdir/libpagedhybrid.a" | awk 'NF == 3 {print $3}' | sort -u >"$tmp/a.txt"
for lib in so a; do
  check
  if ! cmp -s "$tmp/api.txt" "$tmp/$lib.txt"; then
    fail "libpagedhybrid.$lib's exported symbols are not the ph_* API; diff (< header, > library):"
    diff "$tmp/api.txt" "$tmp/$lib.txt" | head -n 20 >&2
  fi
done

# ---- 3. the program of docs/embedding.md ------------------------------------------------------
awk '/^```c$/ {on = 1; next} /^```$/ {on = 0} on' "$PH_SOURCE_DIR/docs/embedding.md" >"$tmp/embed.c"
check; grep -q "ph_engine_create" "$tmp/embed.c" || fail "no C program found in docs/embedding.md"
lines=$(wc -l <"$tmp/embed.c")
echo "docs/embedding.md: a $lines-line program"
cat >"$tmp/collide.c" <<'EOF'
/* Names the library uses internally, defined again by the "embedding program": a static link
 * must take the program's and keep the library's to itself. */
int arena_alloc = 1, engine_create = 2, pool_run = 3, json_kind = 4;
float bf16_to_f32(unsigned short x);
float bf16_to_f32(unsigned short x) { return (float)x; }
EOF
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cflags="${PH_CFLAGS:-}"
# word splitting of the pkg-config output and the flags is intended
# shellcheck disable=SC2046,SC2086
$CC $cflags -std=c11 -Wall -Wextra -Werror "$tmp/embed.c" -o "$tmp/embed-shared" \
  $(pkg-config --cflags --libs pagedhybrid) >"$tmp/cc-shared.log" 2>&1
rc=$?
check; [ $rc -eq 0 ] || fail "shared link failed: $(cat "$tmp/cc-shared.log")"
# shellcheck disable=SC2046,SC2086
$CC $cflags -std=c11 -Wall -Wextra -Werror "$tmp/embed.c" "$tmp/collide.c" -o "$tmp/embed-static" \
  $(pkg-config --cflags --libs pagedhybrid-static) >"$tmp/cc-static.log" 2>&1
rc=$?
check; [ $rc -eq 0 ] || fail "static link with colliding names failed: $(cat "$tmp/cc-static.log")"
check
if readelf -d "$tmp/embed-static" 2>/dev/null | grep -q 'libpagedhybrid'; then
  fail "the static build still needs libpagedhybrid.so"
fi

LD_LIBRARY_PATH="$libdir" "$tmp/embed-shared" "$model" >"$tmp/out-shared.txt" 2>"$tmp/err-shared.txt"
rc=$?
check; [ $rc -eq 0 ] || fail "embed-shared exited non-zero: $(cat "$tmp/err-shared.txt")"
"$tmp/embed-static" "$model" >"$tmp/out-static.txt" 2>"$tmp/err-static.txt"
rc=$?
check; [ $rc -eq 0 ] || fail "embed-static exited non-zero: $(cat "$tmp/err-static.txt")"
check; cmp -s "$tmp/out-shared.txt" "$tmp/out-static.txt" || fail "shared and static runs printed different streams"

out="$tmp/out-shared.txt"
for id in 1 2; do
  check
  n=$(grep -c "^request $id: token " "$out")
  [ "$n" -eq 8 ] || fail "request $id streamed $n tokens through the callback, expected 8"
  check; grep -qx "request $id: length" "$out" || fail "request $id: no finish callback with \"length\""
  check; grep -qx "request $id: 8 tokens, finished: length" "$out" || fail "request $id: no summary line"
done
# The greedy request against the CLI's own greedy run of the same prompt.
want=$("$PH_CLI" generate --model "$model" --tokens 11,22,33 --max-new 8 2>/dev/null | sed -n 's/^generated: //p')
got=$(sed -n 's/^request 1: token //p' "$out" | paste -sd, -)
check; [ -n "$want" ] && [ "$got" = "$want" ] || fail "greedy tokens $got, generate gave $want"

if [ "$fails" -eq 0 ]; then
  echo "ok   test_install ($checks checks; greedy tokens $got)"
  echo "1 passed, 0 failed ($checks checks, 0 failed)"
  exit 0
fi
echo "FAIL test_install"
echo "0 passed, 1 failed ($checks checks, $fails failed)"
exit 1
