#!/usr/bin/env python3
"""Times the PyTorch equivalent of every row pallas_bench measured, in the same
way (CUDA events, warm-up, median, rotating input sets past L2), and prints
our time over theirs.

    python3 bench/torch_peers.py PALLAS_CSV OUT_CSV

PyTorch eager is the peer, as a PyTorch user writes it: bias_gelu is
gelu(x + b) and the *_residual norms are h = x + r then the norm of h (two
kernels each); cross_entropy is F.cross_entropy(..., reduction="none").
"""
import csv
import statistics
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch_peers: PyTorch is not installed; no peer timings")
    sys.exit(0)

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def median_ms(fn, reps=50, warmup=5):
    for i in range(warmup):
        fn(i)
    times = []
    for i in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn(i)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def rotation(bytes_per_set):
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    return int(min(max(3.0 * l2 / bytes_per_set + 1, 1), 8))


def peer(op, dtype, shape, nbytes):
    shape = shape.split(" ")[0]  # "8192x8191 (direct)": the shape the direct twin ran
    sets = rotation(nbytes)
    dev = "cuda"
    if op == "cast":
        src, dst = (DTYPES[d] for d in dtype.split("->"))
        n = int(shape)
        xs = [torch.empty(n, device=dev).uniform_(-2, 2).to(src) for _ in range(sets)]
        return median_ms(lambda i: xs[i % sets].to(dst))
    t = DTYPES[dtype]
    if op == "cross_entropy":
        r, v = (int(x) for x in shape.split("x"))
        logits = [torch.empty(r, v, device=dev, dtype=t).uniform_(-2, 2) for _ in range(sets)]
        labels = torch.randint(0, v, (r,), device=dev)
        return median_ms(lambda i: F.cross_entropy(logits[i % sets], labels, reduction="none"))
    if op in ("rms_norm", "layer_norm", "rms_norm_residual", "layer_norm_residual", "softmax",
              "log_softmax", "row_sum", "row_max"):
        r, c = (int(v) for v in shape.split("x"))
        xs = [torch.empty(r, c, device=dev, dtype=t).uniform_(-2, 2) for _ in range(sets)]
        rs = [torch.empty(r, c, device=dev, dtype=t).uniform_(-1, 1) for _ in range(sets)]
        w = torch.empty(c, device=dev, dtype=t).uniform_(0.5, 1.5)
        b = torch.empty(c, device=dev, dtype=t).uniform_(-1, 1)
        fns = {
            "rms_norm": lambda i: F.rms_norm(xs[i % sets], (c,), w, 1e-5),
            "layer_norm": lambda i: F.layer_norm(xs[i % sets], (c,), w, b, 1e-5),
            "rms_norm_residual": lambda i: F.rms_norm(xs[i % sets] + rs[i % sets], (c,), w, 1e-5),
            "layer_norm_residual":
                lambda i: F.layer_norm(xs[i % sets] + rs[i % sets], (c,), w, b, 1e-5),
            "softmax": lambda i: torch.softmax(xs[i % sets], dim=-1),
            "log_softmax": lambda i: torch.log_softmax(xs[i % sets], dim=-1),
            "row_sum": lambda i: xs[i % sets].sum(dim=-1),
            "row_max": lambda i: xs[i % sets].amax(dim=-1),
        }
        return median_ms(fns[op])
    if op == "transpose":
        r, c = (int(v) for v in shape.split("x"))
        xs = [torch.empty(r, c, device=dev, dtype=t).uniform_(-2, 2) for _ in range(sets)]
        outs = [torch.empty(c, r, device=dev, dtype=t) for _ in range(sets)]
        return median_ms(lambda i: outs[i % sets].copy_(xs[i % sets].t()))
    if op == "bias_gelu":
        r, c = (int(v) for v in shape.split("x"))
        xs = [torch.empty(r, c, device=dev, dtype=t).uniform_(-2, 2) for _ in range(sets)]
        bs = [torch.empty(c, device=dev, dtype=t).uniform_(-2, 2) for _ in range(sets)]
        return median_ms(lambda i: F.gelu(xs[i % sets] + bs[i % sets], approximate="tanh"))
    n = int(shape)
    xs = [torch.empty(n, device=dev, dtype=t).uniform_(-2, 2) for _ in range(sets)]
    ys = [torch.empty(n, device=dev, dtype=t).uniform_(-2, 2) for _ in range(sets)]
    outs = [torch.empty(n, device=dev, dtype=t) for _ in range(sets)]
    fns = {
        "add": lambda i: torch.add(xs[i % sets], ys[i % sets], out=outs[i % sets]),
        "mul": lambda i: torch.mul(xs[i % sets], ys[i % sets], out=outs[i % sets]),
        "axpy": lambda i: ys[i % sets].add_(xs[i % sets], alpha=1e-3),
        "gelu": lambda i: F.gelu(xs[i % sets], approximate="tanh"),
        "silu": lambda i: F.silu(xs[i % sets]),
        "sum_all": lambda i: xs[i % sets].sum(),
        "max_all": lambda i: xs[i % sets].max(),
    }
    return median_ms(fns[op])


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    if not torch.cuda.is_available():
        print("torch_peers: no CUDA device visible to PyTorch")
        sys.exit(0)
    rows = list(csv.DictReader(open(sys.argv[1])))
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    with open(sys.argv[2], "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["op", "dtype", "shape", "us", "torch_us", "ours_over_torch", "gbs",
                      "copy_fraction"])
        print(f"\n{'op':<20} {'dtype':<10} {'shape':<12} {'ours us':>10} {'torch us':>10} "
              f"{'ours/torch':>10} {'GB/s':>8} {'of copy':>8}")
        for r in rows:
            try:
                torch_us = 1e3 * peer(r["op"], r["dtype"], r["shape"], float(r["bytes"]))
            except (KeyError, ValueError) as e:  # a row this script has no peer for
                print(f"{r['op']:<20} {r['dtype']:<10} {r['shape']:<12} no peer ({e!r})")
                continue
            us = float(r["us"])
            ratio = us / torch_us
            out.writerow([r["op"], r["dtype"], r["shape"], us, f"{torch_us:.3f}", f"{ratio:.3f}",
                          r["gbs"], r["copy_fraction"]])
            print(f"{r['op']:<20} {r['dtype']:<10} {r['shape']:<12} {us:>10.2f} {torch_us:>10.2f} "
                  f"{ratio:>10.2f} {float(r['gbs']):>8.1f} {100 * float(r['copy_fraction']):>7.1f}%")


if __name__ == "__main__":
    main()
