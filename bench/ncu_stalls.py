#!/usr/bin/env python3
"""Where a kernel's warps stall, instruction by instruction, from Nsight Compute's source page.

On the device (after a profile with source counters, e.g. `ncu --set full -o REPORT ...`):

    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > sass.csv

Here:

    bench/ncu_stalls.py sass.csv [KERNEL_INDEX] [TOP]

prints the kernel's stall reasons summed over its instructions, then the TOP instructions
(default 40) with the most warp-stall samples: their share of all samples, how often they ran,
their two largest stall reasons and the SASS. E.g. matmul_bt 8192^3 on an H100 (twenty-fourth
session): the consumers' two full-barrier waits (`@!P4 BRA` after SYNCS.PHASECHK, stall
long_sb) hold 24 % of the samples, the tile index's 32-bit division ~10 %.
"""
import csv
import sys


def main():
    path = sys.argv[1]
    which = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    kernels, current = [], None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                current = {"name": row[1], "rows": []}
                kernels.append(current)
            elif row[0] == "Address":
                current["header"] = row
            elif current is not None:
                current["rows"].append(row)
    kernel = kernels[which]
    col = {name: i for i, name in enumerate(kernel["header"])}
    rows = kernel["rows"]
    samples_col = col["Warp Stall Sampling (All Samples)"]
    samples = lambda r: int(r[samples_col] or 0)
    total = sum(samples(r) for r in rows) or 1
    stalls = [n for n in kernel["header"] if n.startswith("stall_") and "Not Issued" not in n]
    by_reason = {s: sum(int(r[col[s]] or 0) for r in rows) for s in stalls}
    print(f"{kernel['name']}: {len(rows)} instructions, {total} samples")
    print("by reason:", ", ".join(f"{s[6:]} {100 * v / total:.1f} %"
                                  for s, v in sorted(by_reason.items(), key=lambda x: -x[1])[:8] if v))
    for i in sorted(range(len(rows)), key=lambda i: -samples(rows[i]))[:top]:
        r = rows[i]
        reasons = sorted(((int(r[col[s]] or 0), s[6:]) for s in stalls), reverse=True)[:2]
        print(f"{i:5d} {100 * samples(r) / total:5.1f} % ran {r[col['Instructions Executed']]:>8}  "
              f"{', '.join(f'{n} {v}' for v, n in reasons):28s} {r[1]}")


if __name__ == "__main__":
    main()
