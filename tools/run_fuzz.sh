#!/bin/sh
# Runs one libFuzzer target over its committed seed corpus without modifying
# it: libFuzzer writes new inputs only into the first corpus directory, so a
# scratch directory goes first and the committed corpus second (read only).
#
# Usage: tools/run_fuzz.sh FUZZER CORPUS_DIR WORK_DIR SECONDS [libFuzzer flags...]
#   WORK_DIR/corpus     new inputs found in this run (scratch; kept for inspection)
#   WORK_DIR/artifacts  crash-*, leak-*, timeout-*, oom-* reproducers
# Exit status: libFuzzer's (0 when nothing was found). CTest calls this with a
# short SECONDS; docs/fuzzing.md describes longer campaigns.
set -eu
if [ $# -lt 4 ]; then
  echo "usage: $0 FUZZER CORPUS_DIR WORK_DIR SECONDS [libFuzzer flags...]" >&2
  exit 2
fi
fuzzer=$1 corpus=$2 work=$3 seconds=$4
shift 4
mkdir -p "$work/corpus" "$work/artifacts"
exec "$fuzzer" -max_total_time="$seconds" -timeout=5 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$@" "$work/corpus" "$corpus"
