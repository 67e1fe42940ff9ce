#!/usr/bin/env python3
"""Compares two runs of the benchmarks, row by row: what a change did.

    bench/compare_runs.py OLD.csv NEW.csv

Either both are `pallas_matmul_bench --csv` files (matmul.csv: op,m,n,k,ours_ms,cublaslt_ms,...)
or both `pallas_bench --csv` files (pallas.csv: op,dtype,shape,...,us,...). For each row
present in both it prints our time before and after, their ratio (after / before: below 1 is
faster), and for matmul rows cuBLASLt's before and after, since the peer's own run-to-run
spread (676..776 TFLOP/s at 8192^3 on the H200 across four runs) bounds what a change shows.
Where a run timed launches back to back or in a captured graph too (its CSV has ours_b2b_ms,
ours_graph_ms), the row ends with our time over cuBLASLt's those ways ("b2b", "graph"). Rows in only one file are listed at the end. Example, the nineteenth session's last run
against a later one:

    bench/compare_runs.py bench/results/2026-11-26-h200-run4-final/matmul.csv $OUT/matmul.csv
"""

import csv
import sys


def read(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{path}: no rows")
    if "cublaslt_ms" in rows[0]:
        key = lambda r: (r["op"], int(r["m"]), int(r["n"]), int(r["k"]))
        kind = "matmul"
    elif "us" in rows[0]:
        key = lambda r: (r["op"], r["dtype"], r["shape"])
        kind = "pallas"
    else:
        sys.exit(f"{path}: neither a pallas_matmul_bench nor a pallas_bench csv")
    # A row may repeat (matmul_bt 4096^3 is both a square and an LLM shape): the n-th
    # occurrence of a key pairs with the n-th in the other file.
    keyed, seen = {}, {}
    for r in rows:
        k = key(r)
        seen[k] = seen.get(k, 0) + 1
        keyed[k + (seen[k],)] = r
    return kind, keyed


def device_ratios(old, new):
    """Ours / cuBLASLt's time back to back and in a captured graph (the device's, host hidden)
    where a run has them (pallas_matmul_bench from the twenty-sixth and the twenty-eighth
    session on): '  b2b 1.21 -> 1.05  graph 1.10'."""
    def ratio(r, ours_key, peer_key):
        try:
            ours, peer = float(r[ours_key]), float(r[peer_key])
        except (KeyError, TypeError, ValueError):
            return None
        return ours / peer if peer > 0 and ours == ours else None
    text = ""
    for name, ours_key, peer_key in (("b2b", "ours_b2b_ms", "cublaslt_b2b_ms"),
                                     ("graph", "ours_graph_ms", "cublaslt_graph_ms")):
        before, after = ratio(old, ours_key, peer_key), ratio(new, ours_key, peer_key)
        if after is None:
            continue
        text += (f"  {name} {before:.2f} -> {after:.2f}" if before is not None
                 else f"  {name} {after:.2f}")
    return text


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    old_kind, old = read(sys.argv[1])
    new_kind, new = read(sys.argv[2])
    if old_kind != new_kind:
        sys.exit("the two files come from different benchmarks")
    both = [k for k in new if k in old]
    if old_kind == "matmul":
        print(f"{'op':<20} {'M':>6} {'N':>6} {'K':>6} {'ours ms':>18} {'after/before':>12} "
              f"{'cuBLASLt ms':>18} {'ours/theirs':>14}  instance (after)")
        for k in both:
            o, n = old[k], new[k]
            ours0, ours1 = float(o["ours_ms"]), float(n["ours_ms"])
            peer0, peer1 = float(o["cublaslt_ms"]), float(n["cublaslt_ms"])
            vs0 = ours0 / peer0 if peer0 == peer0 and peer0 > 0 else float("nan")
            vs1 = ours1 / peer1 if peer1 == peer1 and peer1 > 0 else float("nan")
            change = ours1 / ours0 if ours0 > 0 else float("nan")
            print(f"{k[0]:<20} {k[1]:>6} {k[2]:>6} {k[3]:>6} {ours0:>8.4f} -> {ours1:<8.4f}"
                  f"{change:>12.2f} {peer0:>8.4f} -> {peer1:<8.4f}"
                  f" {vs0:>5.2f} -> {vs1:<5.2f}  {n['instance']}{device_ratios(o, n)}")
    else:
        print(f"{'op':<20} {'dtype':<6} {'shape':<22} {'us':>20} {'after/before':>12}  instance "
              f"(after)")
        for k in both:
            us0, us1 = float(old[k]["us"]), float(new[k]["us"])
            change = us1 / us0 if us0 > 0 else float("nan")
            print(f"{k[0]:<20} {k[1]:<6} {k[2]:<22} {us0:>9.2f} -> {us1:<9.2f}"
                  f"{change:>12.2f}  {new[k]['instance']}")
    only_old = [k for k in old if k not in new]
    only_new = [k for k in new if k not in old]
    if only_old:
        print("\nonly before:", ", ".join(",".join(map(str, k[:-1])) for k in only_old))
    if only_new:
        print("\nonly after:", ", ".join(",".join(map(str, k[:-1])) for k in only_new))


if __name__ == "__main__":
    main()
