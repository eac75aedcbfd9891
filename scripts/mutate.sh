#!/usr/bin/env bash
# mutate.sh — mutation testing: can the tests fail? (docs/testing.md, "Mutation testing")
#
# Applies each one-line mutation of scripts/mutations.txt, one at a time, to a scratch copy of the
# tree (build/mutate/tree; the real sources are never edited), rebuilds the tests the mutation
# names in one build folder kept between runs (build/mutate/build: only the mutated file's object
# and the relinks are redone), runs them, and restores the file. A mutation is
#   killed     when one of its tests fails (or times out, or crashes),
#   SURVIVED   when all of them pass: the tests cannot tell the mutated code from the real one,
#   INVALID    when its original text is not found exactly once in its file, or it does not build.
# Prints one line per mutation and a summary; exits 1 when any survived or is invalid, 2 when the
# unmutated tree already fails its tests (then no mutation could be judged).
#
#   scripts/mutate.sh              every mutation of scripts/mutations.txt (make mutate)
#   scripts/mutate.sh M2 M3        only those ids
# Environment: MUTATIONS (the list file), MUTATE_DIR (build/mutate), JOBS (nproc),
# MUTATE_TIMEOUT (seconds per test run, 300).
#
# The list format (scripts/mutations.txt): blocks of "key: value" lines, separated by blank
# lines, '#' comments. Keys: id, file (relative to the repository root), from (text that occurs
# exactly once in the file; leading and trailing spaces are trimmed), to (its replacement),
# tests (ctest names, space-separated), why (what the mutation simulates).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIST=${MUTATIONS:-$ROOT/scripts/mutations.txt}
WORK=${MUTATE_DIR:-$ROOT/build/mutate}
TREE=$WORK/tree
BUILD=$WORK/build
LOGS=$WORK/logs
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
TIMEOUT=${MUTATE_TIMEOUT:-300}

die() {
  echo "mutate: $*" >&2
  exit 2
}

[ -f "$LIST" ] || die "no mutation list at $LIST"
command -v perl >/dev/null || die "perl is needed (it applies the replacements)"

# ---- parse the list -----------------------------------------------------------------------------
ids=() files=() froms=() tos=() testss=() whys=()
cur_id="" cur_file="" cur_from="" cur_to="" cur_tests="" cur_why="" line_no=0 block_line=0
flush() {
  if [ -n "$cur_id$cur_file$cur_from$cur_to$cur_tests" ]; then
    for k in id file from to tests; do
      v="cur_$k"
      [ -n "${!v}" ] || die "$LIST:$block_line: mutation ${cur_id:-?} has no '$k:'"
    done
    for prev in "${ids[@]}"; do [ "$prev" != "$cur_id" ] || die "$LIST:$block_line: id $cur_id twice"; done
    ids+=("$cur_id") files+=("$cur_file") froms+=("$cur_from") tos+=("$cur_to")
    testss+=("$cur_tests") whys+=("$cur_why")
  fi
  cur_id="" cur_file="" cur_from="" cur_to="" cur_tests="" cur_why=""
}
while IFS= read -r line || [ -n "$line" ]; do
  line_no=$((line_no + 1))
  trimmed="${line#"${line%%[![:space:]]*}"}"
  case "$trimmed" in '#'*) continue ;; esac
  if [ -z "$trimmed" ]; then
    flush
    continue
  fi
  key=${line%%:*}
  val=${line#*:}
  val="${val#"${val%%[![:space:]]*}"}" # trim leading spaces
  val="${val%"${val##*[![:space:]]}"}" # trim trailing spaces
  [ -n "$cur_id$cur_file$cur_from$cur_to$cur_tests$cur_why" ] || block_line=$line_no
  case "$key" in
  id) cur_id=$val ;;
  file) cur_file=$val ;;
  from) cur_from=$val ;;
  to) cur_to=$val ;;
  tests) cur_tests=$val ;;
  why) cur_why=$val ;;
  *) die "$LIST:$line_no: unknown key '$key' (id, file, from, to, tests, why)" ;;
  esac
done <"$LIST"
flush
[ ${#ids[@]} -gt 0 ] || die "$LIST holds no mutations"

# which to run
sel=()
for i in "${!ids[@]}"; do
  if [ $# -eq 0 ]; then
    sel+=("$i")
  else
    for want in "$@"; do [ "${ids[$i]}" != "$want" ] || sel+=("$i"); done
  fi
done
[ ${#sel[@]} -gt 0 ] || die "no mutation matches: $*"

# ---- the scratch tree: copied once, then only files that changed are copied again --------------
# (unchanged files keep their times, so the build folder stays valid between runs)
mkdir -p "$TREE" "$BUILD" "$LOGS"
cd "$ROOT"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  list_files() { git ls-files --cached --others --exclude-standard; }
else
  list_files() { find . -path ./build -prune -o -path ./.git -prune -o -type f -print | sed 's|^\./||'; }
fi
n_copied=0
while IFS= read -r f; do
  [ -f "$f" ] || continue # deleted in the work tree, not yet in git
  if ! cmp -s "$f" "$TREE/$f" 2>/dev/null; then
    mkdir -p "$TREE/$(dirname "$f")"
    cp "$f" "$TREE/$f"
    n_copied=$((n_copied + 1))
  fi
done < <(list_files)
# files gone from the work tree leave the copy too (a stale test source would still be built)
( cd "$TREE" && find . -type f | sed 's|^\./||' ) | while IFS= read -r f; do
  [ -e "$ROOT/$f" ] || rm -f "$TREE/$f"
done

# the file being mutated goes back whatever happens
restore_from=""
restore_to=""
cleanup() {
  if [ -n "$restore_to" ]; then
    cp "$restore_from" "$restore_to"
    restore_to=""
  fi
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

# ---- configure (every run: a test file added since the last one needs its target; a cached
# configure takes a second), build and run the unmutated tree ------------------------------------
cmake -S "$TREE" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPH_WERROR=OFF \
  -DPH_REQUIRE_ORT=OFF >"$LOGS/configure.log" 2>&1 || die "configure failed: $LOGS/configure.log"
all_tests=$(printf '%s\n' "${sel[@]}" | while read -r i; do echo "${testss[$i]}"; done | tr ' ' '\n' |
  sed '/^$/d' | sort -u | tr '\n' ' ')
targets_for() { # the tests, plus the CLI (test_cli*, test_inference_metadata and others run it)
  echo "$1 pagedhybrid_cli"
}
regex_for() { echo "^($(echo "$1" | xargs | tr ' ' '|'))\$"; }
build() { # $1: targets; $2: log
  # shellcheck disable=SC2086
  cmake --build "$BUILD" -j "$JOBS" --target $1 >"$2" 2>&1
}
run_tests() { # $1: tests; $2: log
  ctest --test-dir "$BUILD" -R "$(regex_for "$1")" --timeout "$TIMEOUT" --output-on-failure \
    --no-tests=error -j "$JOBS" >"$2" 2>&1
}

echo "mutate: ${#sel[@]} mutations from ${LIST#"$ROOT"/}, scratch tree $TREE ($n_copied files copied)"
t0=$(date +%s)
printf 'mutate: the unmutated tree: building and running %s... ' "$all_tests"
build "$(targets_for "$all_tests")" "$LOGS/baseline-build.log" ||
  die "the unmutated tree does not build: $LOGS/baseline-build.log"
if ! run_tests "$all_tests" "$LOGS/baseline-tests.log"; then
  echo "FAILED"
  die "the unmutated tree fails its tests, so no mutation can be judged: $LOGS/baseline-tests.log"
fi
echo "pass ($(($(date +%s) - t0)) s)"

# ---- one mutation at a time ---------------------------------------------------------------------
n_killed=0 n_survived=0 n_invalid=0
survivors=() invalids=()
k=0
for i in "${sel[@]}"; do
  k=$((k + 1))
  id=${ids[$i]} file=${files[$i]} tests=${testss[$i]}
  tag=$(printf '[%2d/%d] %-4s %-34s' "$k" "${#sel[@]}" "$id" "$file")
  target=$TREE/$file
  log=$LOGS/$id.log
  if [ ! -f "$target" ]; then
    echo "$tag INVALID: no such file"
    n_invalid=$((n_invalid + 1)) invalids+=("$id")
    continue
  fi
  count=$(FROM=${froms[$i]} perl -0777 -ne '$n = () = /\Q$ENV{FROM}\E/g; print $n' "$target")
  if [ "$count" != 1 ]; then
    echo "$tag INVALID: its text occurs $count times in the file (must be exactly once)"
    n_invalid=$((n_invalid + 1)) invalids+=("$id")
    continue
  fi
  cp -p "$target" "$WORK/original"
  restore_from=$WORK/original
  restore_to=$target
  FROM=${froms[$i]} TO=${tos[$i]} perl -0777 -pi -e 's/\Q$ENV{FROM}\E/$ENV{TO}/' "$target"
  t1=$(date +%s)
  if ! build "$(targets_for "$tests")" "$log"; then
    echo "$tag INVALID: does not build ($log)"
    n_invalid=$((n_invalid + 1)) invalids+=("$id")
  elif run_tests "$tests" "$log"; then
    echo "$tag SURVIVED $tests ($(($(date +%s) - t1)) s)"
    n_survived=$((n_survived + 1)) survivors+=("$id")
  else
    failed=$(sed -n 's/^[[:space:]]*[0-9]* - \(test_[A-Za-z0-9_]*\) (.*/\1/p' "$log" | sort -u | xargs)
    echo "$tag killed by ${failed:-its tests} ($(($(date +%s) - t1)) s)"
    n_killed=$((n_killed + 1))
  fi
  # back to the original; a fresh time stamp makes the next build recompile it
  cp "$WORK/original" "$target"
  restore_to=""
done
# the last mutated objects are rebuilt from the restored sources by the next run's baseline

echo "mutate: ${#sel[@]} mutations: $n_killed killed, $n_survived survived, $n_invalid invalid" \
  "($(($(date +%s) - t0)) s); logs in ${LOGS#"$ROOT"/}"
[ $n_survived -eq 0 ] || echo "mutate: survived: ${survivors[*]} (strengthen the tests until they fail)"
[ $n_invalid -eq 0 ] || echo "mutate: invalid: ${invalids[*]} (fix scripts/mutations.txt)"
[ $n_survived -eq 0 ] && [ $n_invalid -eq 0 ]
