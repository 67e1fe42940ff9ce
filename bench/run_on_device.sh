#!/usr/bin/env bash
# Runs on the lent GPU machine (the `device` tool), from the repository root,
# with the binaries built here carried along (the device machine has no LLVM).
# The programs are larger than the tool's 64 MiB carry, so they travel packed:
#
#   ninja -C build && bench/pack_for_device.sh      # here: build/device/bundle.tar.gz
#   run(command="bench/run_on_device.sh", carry=["build/device"])
#
# Correctness first (the `gpu` tests), then the matmul benchmark against
# cuBLASLt, the memory-bound ops' benchmark and the PyTorch peers. Logs and
# CSVs go to $OUT (the device tool's, which comes back even when the call runs
# out of time). Each step has its own time limit (`timeout`), so a kernel that
# hangs (a barrier never completing) costs that step, not the whole call: the
# limits (and timeout's 5 s grace each) add up to about 540 s of the device
# tool's 600. (Exit status 137 is also what an out-of-memory kill gives.)
set -uo pipefail
OUT=${OUT:-/tmp/pallas-bench}
mkdir -p "$OUT"
if [ -f build/device/bundle.tar.gz ]; then
  tar -xzf build/device/bundle.tar.gz || { echo "cannot unpack build/device/bundle.tar.gz"; exit 1; }
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
  | tee "$OUT/gpu.txt"
# The carried programs were linked on Debian 12 (static libstdc++/libgcc/Boost):
# they need glibc 2.36 or newer here.
ldd --version | head -n 1
status=0
# limited SECONDS COMMAND...: runs COMMAND for at most SECONDS, says so if it ran out.
limited() {
  local seconds=$1
  shift
  timeout -k 5 "$seconds" "$@"
  local rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "TIMEOUT: $* ran past ${seconds} s (a hang? 137 may be an out-of-memory kill)" \
      | tee -a "$OUT/timeouts.txt"
  fi
  return $rc
}
for t in "130 build/tests/ops/ops_test --gtest_filter=*Cuda*" \
         "50 build/tests/kernels/features_test --gtest_filter=*Cuda*" \
         "30 build/tests/runtime/runtime_cuda_test"; do
  seconds=${t%% *}
  t=${t#* }
  if [ -x "${t%% *}" ]; then
    log="$OUT/$(basename "${t%% *}").log"
    limited "$seconds" $t > "$log" 2>&1 || status=1
    if grep "^TIMEOUT" "$log"; then  # the test that was running
      grep "^\[ RUN" "$log" | tail -n 1
    fi
    tail -n 3 "$log"
    # On this machine a skip for want of a device is a failure: the tests skip so when CUDA
    # finds no usable device (a driver older than CUDA 13 wants reads as one). Other skips
    # (emulator-only checks in a suite's Cuda instance) are expected.
    if grep -q "^no CUDA device" "$log"; then
      echo "FAIL: ${t%% *} found no CUDA device on the GPU machine:"
      grep -B1 "^no CUDA device" "$log" | head -n 4
      status=1
    fi
  fi
done
if [ -x build/bench/pallas_matmul_bench ]; then
  # PALLAS_LOG_LAUNCH: a launch that asked for clusters and ran without them says so.
  PALLAS_LOG_LAUNCH=1 limited 150 build/bench/pallas_matmul_bench --csv "$OUT/matmul.csv" \
    > "$OUT/matmul.txt" 2>&1 || status=1
  cat "$OUT/matmul.txt"
  if grep -q "launching without clusters" "$OUT/matmul.txt"; then
    echo "NOTE: some launches asked for clusters and ran without them (see above)"
  fi
fi
if limited 100 build/bench/pallas_bench --csv "$OUT/pallas.csv" > "$OUT/pallas.txt" 2>&1; then
  head -n 2 "$OUT/pallas.txt"
else
  status=1
  tail -n 5 "$OUT/pallas.txt"
fi
limited 40 python3 bench/torch_peers.py "$OUT/pallas.csv" "$OUT/compare.csv" \
  | tee "$OUT/compare.txt" || status=1
exit $status
