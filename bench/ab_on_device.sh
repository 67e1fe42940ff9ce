#!/usr/bin/env bash
# Times the previous build's matmul bench against this one on the same rows, alternating,
# in one call on the lent GPU (the `device` tool), so that both see the same machine,
# clocks and cuBLASLt:
#
#   bench/pack_for_device.sh --keep-previous    # here, after ninja -C build
#   (or bench/build_previous_bench.sh REV, then bench/pack_for_device.sh: REV's bench)
#   run(command="bench/ab_on_device.sh 2 matmul_bt,8192,8192,8192 matmul_bt,64,4096,4096",
#       carry=["build/device"])
#
#   ab_on_device.sh ROUNDS ROW...    # ROW as pallas_matmul_bench --only takes it
#
# PREVIOUS_BENCH names the previous build's archive (default build/device/previous-bench.gz;
# bench/build_previous_bench.sh REV OUT.gz writes others), so one call can time this build
# against several earlier ones:
#
#   bench/ab_on_device.sh 2 ROWS...; PREVIOUS_BENCH=build/device/e5a67ce-bench.gz \
#     OUT=$OUT/e5 bench/ab_on_device.sh 2 ROWS...
#
# With PREVIOUS_ARGS set, "previous" is this build run with those arguments instead of the
# previous build, e.g. PREVIOUS_ARGS="--max-cluster 1": the deep split-K instances' workspace
# sum against their cluster sum, one binary (no previous-bench.gz needed).
#
# Writes $OUT/ab-previous-R.csv and $OUT/ab-current-R.csv for each round R and prints
# bench/compare_runs.py of each pair (previous -> current). The twenty-fourth session's
# clusters were measured this way (bench/results/2026-11-26-h100-clusters/).
set -uo pipefail
OUT=${OUT:-/tmp/pallas-bench}
mkdir -p "$OUT"
rounds=${1:?rounds}
shift
[ $# -gt 0 ] || { echo "ab_on_device.sh: no rows" >&2; exit 2; }
if [ -f build/device/bundle.tar.gz ] && [ ! -e build/bench/pallas_matmul_bench ]; then
  tar -xzf build/device/bundle.tar.gz || { echo "cannot unpack build/device/bundle.tar.gz"; exit 1; }
fi
previous_args=()
if [ -n "${PREVIOUS_ARGS:-}" ]; then
  read -r -a previous_args <<< "$PREVIOUS_ARGS"
  previous=build/bench/pallas_matmul_bench
else
  archive=${PREVIOUS_BENCH:-build/device/previous-bench.gz}
  [ -f "$archive" ] || { echo "no $archive"; exit 1; }
  previous=$(mktemp)
  gunzip -c "$archive" > "$previous" && chmod +x "$previous"
fi
only=()
for row in "$@"; do only+=(--only "$row"); done
status=0
for ((r = 1; r <= rounds; ++r)); do
  timeout -k 5 120 "$previous" "${previous_args[@]}" --csv "$OUT/ab-previous-$r.csv" "${only[@]}" \
    > "$OUT/ab-previous-$r.txt" 2>&1 || status=1
  timeout -k 5 120 build/bench/pallas_matmul_bench --csv "$OUT/ab-current-$r.csv" "${only[@]}" \
    > "$OUT/ab-current-$r.txt" 2>&1 || status=1
  echo "== round $r: previous -> current"
  if [ -f "$OUT/ab-previous-$r.csv" ] && [ -f "$OUT/ab-current-$r.csv" ]; then
    python3 bench/compare_runs.py "$OUT/ab-previous-$r.csv" "$OUT/ab-current-$r.csv" || status=1
  else
    tail -n 3 "$OUT/ab-previous-$r.txt" "$OUT/ab-current-$r.txt"
    status=1
  fi
done
[ -n "${PREVIOUS_ARGS:-}" ] || rm -f "$previous"  # a copy of the previous build only
exit $status
