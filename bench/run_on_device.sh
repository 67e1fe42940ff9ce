#!/usr/bin/env bash
# Runs on the lent GPU machine (the `device` tool), from the repository root,
# with the binaries built here carried along (the device machine has no LLVM).
# The programs are larger than the tool's 64 MiB carry, so they travel packed:
#
#   ninja -C build && bench/pack_for_device.sh      # here: build/device/bundle.tar.gz
#   run(command="bench/run_on_device.sh", carry=["build/device"], timeout_s=600)
#
#   run_on_device.sh [GTEST_FILTER]   # only the tests that filter names, then no benchmarks
#
# Correctness first: every CUDA test runs as its own process (gtest's filter naming one test),
# several at a time, each under its own time limit, so a kernel that hangs (a barrier that
# never completes) costs that test's slot and is named, not the whole step. Then the matmul
# benchmark against cuBLASLt, the memory-bound ops' benchmark and the PyTorch peers. What
# comes back under $OUT (the device tool returns at most 8 files, so one is left for the
# caller's own, e.g. a profile): summary.txt (the GPU, one line per test, timeouts, then the
# whole output of each test that did not pass), matmul.txt/.csv, pallas.txt/.csv,
# compare.txt/.csv. The step limits (and timeout's 5 s grace each) add up to about 580 s
# (the matmul bench alone took 178 s on an H100, twenty-sixth session, before it timed each
# row a third way, in a captured graph, from the twenty-eighth: 290 s allowed; pass
# timeout_s=600).
# bench/compare_runs.py OLD.csv NEW.csv then shows, row by row, what changed since a run
# kept under bench/results/.
set -uo pipefail
OUT=${OUT:-/tmp/pallas-bench}
mkdir -p "$OUT"
only=${1:-}
# Unpacked only where the programs are absent (the device machine), never over a build here.
if [ -f build/device/bundle.tar.gz ] && [ ! -e build/tests/ops/ops_test ]; then
  tar -xzf build/device/bundle.tar.gz || { echo "cannot unpack build/device/bundle.tar.gz"; exit 1; }
fi
summary="$OUT/summary.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
  | tee "$summary"
# The carried programs were linked on Debian 12 (static libstdc++/libgcc/Boost):
# they need glibc 2.36 or newer here.
ldd --version | head -n 1 | tee -a "$summary"
status=0
# limited SECONDS COMMAND...: runs COMMAND for at most SECONDS, says so if it ran out.
limited() {
  local seconds=$1
  shift
  timeout -k 5 "$seconds" "$@"
  local rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "TIMEOUT: $* ran past ${seconds} s (a hang? 137 may be an out-of-memory kill)" \
      | tee -a "$summary"
  fi
  return $rc
}

# One test: PASS / FAIL / SKIP / TIMEOUT, its seconds, its name; its log kept in $logs.
logs=$(mktemp -d)
run_one() {
  local program=$1 name=$2
  local log="$logs/$(echo "$name" | tr '/' '_').log"
  local start=$SECONDS
  timeout -k 5 60 "$program" --gtest_filter="$name" > "$log" 2>&1
  local rc=$? verdict=PASS
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    verdict=TIMEOUT
  elif [ $rc -ne 0 ]; then
    verdict=FAIL
  elif grep -q "^\[  SKIPPED \]" "$log"; then
    verdict=SKIP
    # A skip for want of a device is a failure on this machine: CUDA finds no usable device
    # (a driver older than CUDA 13 wants reads as one). Emulator-only checks skip by design.
    grep -q "no CUDA device" "$log" && verdict=FAIL
  fi
  echo "$verdict $((SECONDS - start))s $name"
  [ $verdict = PASS ] || [ $verdict = SKIP ] || mv "$log" "$log.failed"
}
export -f run_one
export logs
# A test that asked for clusters and ran without them says why in its log (how many clusters
# of that size the device holds: tests/ops/matmul_test.cc's MatmulCudaClusters needs 32 of 4).
export PALLAS_LOG_LAUNCH=1
# The CUDA tests, and the graph-capture ones (GraphCapture.*: each in a process of its own here
# too, so that a capture is its kernels' first launch, as ctest's ops.cuda_graph runs them).
filter=${only:-*Cuda*:GraphCapture.*}
for program in build/tests/ops/ops_test build/tests/kernels/features_test \
               build/tests/runtime/runtime_cuda_test; do
  [ -x "$program" ] || { echo "MISSING $program" | tee -a "$summary"; status=1; continue; }
  "$program" --gtest_list_tests --gtest_filter="$filter" \
    | awk -v p="$program" '/^Running main/{next} /^[^ ]/{s=$1} /^  /{print p, s $1}'
done > "$logs/list.txt"
echo "$(wc -l < "$logs/list.txt") tests, 6 at a time, 60 s each at most" | tee -a "$summary"
timeout -k 5 150 xargs -P 6 -L 1 bash -c 'run_one "$0" "$1"' < "$logs/list.txt" \
  | sort -k3 > "$logs/verdicts.txt"
cat "$logs/verdicts.txt" >> "$summary"
grep -v "^PASS\|^SKIP" "$logs/verdicts.txt" && status=1
tested=$(wc -l < "$logs/verdicts.txt")
if [ "$tested" -ne "$(wc -l < "$logs/list.txt")" ]; then
  echo "only $tested of $(wc -l < "$logs/list.txt") tests finished in 150 s" | tee -a "$summary"
  status=1
fi
echo "verdicts: $(cut -d' ' -f1 "$logs/verdicts.txt" | sort | uniq -c | tr '\n' ' ')" \
  | tee -a "$summary"
for f in "$logs"/*.failed; do  # the whole output of each test that did not pass
  [ -f "$f" ] || continue
  echo "===== $(basename "$f" .log.failed)"
  tail -c 20000 "$f"
done >> "$summary"
[ -n "$only" ] && exit $status

if [ -x build/bench/pallas_matmul_bench ]; then
  # PALLAS_LOG_LAUNCH: a launch that asked for clusters and ran without them says so.
  PALLAS_LOG_LAUNCH=1 limited 290 stdbuf -oL build/bench/pallas_matmul_bench \
    --csv "$OUT/matmul.csv" > "$OUT/matmul.txt" 2>&1 || status=1
  cat "$OUT/matmul.txt"
  if grep -q "launching without clusters" "$OUT/matmul.txt"; then
    echo "NOTE: some launches asked for clusters and ran without them (see above)"
  fi
fi
if limited 80 stdbuf -oL build/bench/pallas_bench --csv "$OUT/pallas.csv" \
    > "$OUT/pallas.txt" 2>&1; then
  head -n 2 "$OUT/pallas.txt"
else
  status=1
  tail -n 5 "$OUT/pallas.txt"
fi
PYTHONUNBUFFERED=1 limited 40 python3 bench/torch_peers.py "$OUT/pallas.csv" "$OUT/compare.csv" \
  | tee "$OUT/compare.txt" || status=1
exit $status
