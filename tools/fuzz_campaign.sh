#!/bin/sh
# A long libFuzzer campaign for one target, at the lowest CPU priority, with a
# summary row for docs/fuzzing.md's campaign table (docs/fuzzing.md, "Long
# campaigns").
#
# Usage: tools/fuzz_campaign.sh BUILD_DIR TARGET RUNS OUT_DIR [libFuzzer flags...]
#   BUILD_DIR  a CW_FUZZ=ON build (BUILD_DIR/bin/TARGET)
#   RUNS       executions to reach (e.g. 100000000); the run also stops after
#              CW_FUZZ_MAX_SECONDS (default 86400)
#   OUT_DIR    OUT_DIR/TARGET.log (libFuzzer's output), OUT_DIR/TARGET/{corpus,
#              artifacts} (tools/run_fuzz.sh), OUT_DIR/summary.tsv (one row
#              appended per campaign)
# The committed seed corpus (src/*/corpus/TARGET) is read, never written.
# Exit status: libFuzzer's (0 when nothing was found).
set -eu
if [ $# -lt 4 ]; then
  echo "usage: $0 BUILD_DIR TARGET RUNS OUT_DIR [libFuzzer flags...]" >&2
  exit 2
fi
build=$1 target=$2 runs=$3 out=$4
shift 4
root=$(cd "$(dirname "$0")/.." && pwd)
fuzzer="$build/bin/$target"
[ -x "$fuzzer" ] || { echo "$0: no $fuzzer (build it with -DCW_FUZZ=ON)" >&2; exit 2; }
seeds=$(find "$root/src" -type d -path "*/corpus/$target" | head -n 1)
[ -n "$seeds" ] || { echo "$0: no seed corpus src/*/corpus/$target" >&2; exit 2; }
mkdir -p "$out"
log="$out/$target.log"
commit=$(git -C "$root" rev-parse --short=12 HEAD)
git -C "$root" diff --quiet HEAD -- src || commit="$commit+dirty"
flags=$(grep -o -- '-fsanitize=[^ ;]*' "$build/build.ninja" 2>/dev/null | sort -u | tr '\n' ' ')

: "${ASAN_OPTIONS:=detect_leaks=1}"
: "${UBSAN_OPTIONS:=print_stacktrace=1:halt_on_error=1}"
export ASAN_OPTIONS UBSAN_OPTIONS
start=$(date +%s)
rc=0
# -timeout=60: on a shared machine a stall (or a SIGSTOP) of a few seconds is
# not a hang; flags given later win.
nice -n 19 "$root/tools/run_fuzz.sh" "$fuzzer" "$seeds" "$out/$target" \
  "${CW_FUZZ_MAX_SECONDS:-86400}" -runs="$runs" -timeout=60 "$@" >"$log" 2>&1 || rc=$?
end=$(date +%s)

# The last status line ("#N DONE cov: E ft: F corp: C/...") and the final stats.
stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -n 1; }
last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
field() { echo "$last" | sed -n "s/.* $1: \([0-9]*\).*/\1/p"; }
execs=$(stat number_of_executed_units)
rate=$(stat average_exec_per_sec)
artifacts=$(find "$out/$target/artifacts" -type f | wc -l)
[ -f "$out/summary.tsv" ] ||
  printf 'target\tcommit\texecutions\tseconds\texec_per_s\tcov\tft\tcorpus\tartifacts\trc\tsanitizers\tflags\n' \
    >"$out/summary.tsv"
printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$target" "$commit" "${execs:-?}" \
  "$((end - start))" "${rate:-?}" "$(field cov)" "$(field ft)" "$(field corp)" "$artifacts" \
  "$rc" "$flags" "$*" >>"$out/summary.tsv"
tail -n 1 "$out/summary.tsv"
exit "$rc"
