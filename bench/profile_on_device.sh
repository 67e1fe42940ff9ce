#!/usr/bin/env bash
# Profiles one pallas_matmul_bench row with Nsight Compute on the lent GPU (the `device`
# tool), after bench/run_on_device.sh has unpacked the programs:
#
#   bench/profile_on_device.sh OP,M,N,K [KERNELS]   # writes $OUT/ncu.txt
#
# ncu profiles the row's first KERNELS launches (default 3: ours, then cuBLASLt's, and a
# reduction kernel of cuBLASLt's split-K if it has one), with the sections that say where
# the time goes: throughput against the ceilings, memory traffic, occupancy, warp stalls.
# Clocks are left alone (--clock-control none, METHOD.md).
set -uo pipefail
OUT=${OUT:-/tmp/pallas-bench}
mkdir -p "$OUT"
row=$1
count=${2:-3}
timeout -k 5 120 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats \
  -c "$count" build/bench/pallas_matmul_bench --only "$row" --reps 2 >> "$OUT/ncu.txt" 2>&1
