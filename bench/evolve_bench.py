"""Speed of evolve.py's operators on a Qwen2.5-7B-shaped adapter, and the QR route against the dense route.

Builds two rank-32 bf16 parents with Qwen2.5-7B shapes (28 layers × q,k,v,o,gate,up,down = 196 modules; hidden
3584, intermediate 18944, kv dim 512) like docs/evolve.md appendix B (decaying spectrum, the parents share
half their rank slots), times every operator through evolve.apply_operator (fail-safe included) on the whole
adapter, then compares, on one down_proj (3584 × 18944), the exact QR route (delta_lincomb_svd, w = 0.5,
norm 'keep') with the dense route PEFT's add_weighted_adapter(combination_type="svd") takes: form ΔW,
torch.linalg.svd, truncate to r.

Prints ONE JSON line: seconds {operator: median wall s per whole adapter}, cpu_seconds (the same in
CPU seconds of the process, all threads: robust to other jobs on a shared machine) ("copy_parent" is
the crossover form, the same copy as the mutation), dense_module_s / qr_module_s (fp32, the QR route called on the bf16 module as in
training), ratio = dense / QR, max_abs_diff_rel (max |ΔW_QR − ΔW_dense| / max |ΔW_dense|, both routes in
float64: fp32 rounding alone puts the dense route ~1e-5 off), and peak_rss_mb; extra keys give the float32
comparison, each fp32 route's error against the float64 dense result, and the float64 timings (the float64
dense SVD factors ΔWᵀ, the faster orientation, so dense_module_s_fp64 flatters the dense route).

    python bench/evolve_bench.py                 # full run; the two dense SVDs take minutes on 2 cores
    python bench/evolve_bench.py --layers 2 --skip-dense   # quick look
    python bench/evolve_bench.py --skip-dense --operators delta_slerp,delta_lincomb_svd   # a few
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import evolve  # noqa: E402

SHAPES = {"self_attn.q_proj": (3584, 3584), "self_attn.k_proj": (512, 3584), "self_attn.v_proj": (512, 3584),
          "self_attn.o_proj": (3584, 3584), "mlp.gate_proj": (18944, 3584), "mlp.up_proj": (18944, 3584),
          "mlp.down_proj": (3584, 18944)}  # module: (out, in) of nn.Linear in Qwen2.5-7B


def build_parents(layers, r, seed):
    """Two bf16 adapters: A ~ N(0,1)/√in, B column j ~ 0.02·0.9^j·N(0,1); parent 2 blends 0.7 of parent 1's
    first r/2 slots into its own (common ancestry)."""
    g = torch.Generator().manual_seed(seed)
    decay = 0.9 ** torch.arange(r, dtype=torch.float32)
    p1, p2 = {}, {}
    for layer in range(layers):
        for name, (out, inp) in SHAPES.items():
            stem = f"base_model.model.model.layers.{layer}.{name}"
            A1, A2 = (torch.randn(r, inp, generator=g) / inp ** 0.5 for _ in range(2))
            B1, B2 = (0.02 * torch.randn(out, r, generator=g) * decay for _ in range(2))
            h = r // 2
            A2[:h] = 0.7 * A1[:h] + 0.3 * A2[:h]
            B2[:, :h] = 0.7 * B1[:, :h] + 0.3 * B2[:, :h]
            p1[stem + evolve.A_KEY], p1[stem + evolve.B_KEY] = A1.bfloat16(), B1.bfloat16()
            p2[stem + evolve.A_KEY], p2[stem + evolve.B_KEY] = A2.bfloat16(), B2.bfloat16()
    return p1, p2


def timed(fn, repeats, cpu=None):
    """(median wall seconds, last result) over `repeats` calls; the median CPU seconds of this
    process (all its threads) are appended to `cpu` when given: on a shared machine CPU time
    barely moves with the load, wall time does."""
    times, cpu_times, out = [], [], None
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.process_time() - c0)
    if cpu is not None:
        cpu.append(statistics.median(cpu_times))
    return statistics.median(times), out


def dense_route(parents, stem, r, dtype, transpose=False):
    """PEFT's svd merge on one module: dense ΔW = Σ 0.5·B_i·A_i, reduced SVD, keep r; returns (seconds, product).
    transpose=True factors the tall ΔWᵀ instead (MKL is ~3.5× faster on tall than on wide matrices;
    docs/evolve.md §3): used only for the float64 accuracy reference."""
    t0 = time.perf_counter()
    dw = sum(0.5 * (p[stem + evolve.B_KEY].to(dtype) @ p[stem + evolve.A_KEY].to(dtype)) for p in parents)
    U, S, Vh = torch.linalg.svd(dw.mT if transpose else dw, full_matrices=False)
    del dw
    B, A = U[:, :r] * S[:r].sqrt(), S[:r].sqrt()[:, None] * Vh[:r]
    seconds = time.perf_counter() - t0
    del U, Vh
    return seconds, (B @ A).mT if transpose else B @ A


def qr_product(parents, stem, dtype):
    sub = [{k: v.to(dtype) for k, v in p.items() if k.startswith(stem + ".")} for p in parents]
    child = evolve.delta_lincomb_svd(sub[0], sub[1], torch.Generator().manual_seed(0), w=0.5, norm="keep")
    return child[stem + evolve.B_KEY] @ child[stem + evolve.A_KEY]


def rel_diff(x, ref):
    return float((x.double() - ref.double()).abs().max() / ref.double().abs().max())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    ap.add_argument("--layers", type=int, default=28, help="decoder layers (28 = Qwen2.5-7B, 196 modules)")
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3, help="timed calls per operator (median reported)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default, all cores)")
    ap.add_argument("--skip-dense", action="store_true", help="skip the dense-route comparison (minutes)")
    ap.add_argument("--operators", default="", help="comma-separated operators to time; '' = all")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    p1, p2 = build_parents(args.layers, args.rank, args.seed)
    chosen = [name.strip() for name in args.operators.split(",") if name.strip()]
    seconds, cpu_seconds, fallbacks = {}, {}, []
    for kind, table in (("mutation", evolve.MUTATIONS), ("crossover", evolve.CROSSOVERS)):
        parents = [p1] if kind == "mutation" else [p1, p2]
        for name in table:
            if chosen and name not in chosen:
                continue
            gen = torch.Generator().manual_seed(args.seed)
            cpu = []
            s, (child, info) = timed(lambda: evolve.apply_operator(name, kind, parents, gen), args.repeats,
                                     cpu)
            seconds[name] = round(s, 4)
            cpu_seconds[name] = round(cpu[0], 4)
            print(f"{kind} {name}: {s:.3f} s", file=sys.stderr, flush=True)  # progress; stdout keeps the JSON
            if info["fallback"]:
                fallbacks.append(f"{name}: {info['reason']}")
            del child
    result = {"seconds": seconds, "cpu_seconds": cpu_seconds, "fallbacks": fallbacks, "modules": len(evolve.modules(p1)), "rank": args.rank,
              "threads": torch.get_num_threads(),
              "max_operator_s": max(seconds.values()),
              "peak_rss_mb_operators": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}

    if not args.skip_dense:
        stem = "base_model.model.model.layers.0.mlp.down_proj"
        sub = [{k: v for k, v in p.items() if k.startswith(stem + ".")} for p in (p1, p2)]
        gen = torch.Generator().manual_seed(0)
        qr_s, _ = timed(lambda: evolve.delta_lincomb_svd(sub[0], sub[1], gen, w=0.5, norm="keep"), 5)
        qr64_s, qr64 = timed(lambda: qr_product(sub, stem, torch.float64), 3)
        qr32 = qr_product(sub, stem, torch.float32)
        print(f"QR route {qr_s:.4f} s; dense float32 SVD of one down_proj (minutes) ...", file=sys.stderr, flush=True)
        dense_s, dense32 = dense_route(sub, stem, args.rank, torch.float32)
        print(f"dense float32 {dense_s:.1f} s; dense float64 ...", file=sys.stderr, flush=True)
        dense64_s, dense64 = dense_route(sub, stem, args.rank, torch.float64, transpose=True)
        result.update({
            "dense_module_s": round(dense_s, 3), "qr_module_s": round(qr_s, 5), "ratio": round(dense_s / qr_s, 1),
            "max_abs_diff_rel": rel_diff(qr64, dense64),
            "dense_module_s_fp64": round(dense64_s, 3), "qr_module_s_fp64": round(qr64_s, 5),
            "max_abs_diff_rel_fp32": rel_diff(qr32, dense32),
            "qr32_err_rel": rel_diff(qr32, dense64), "dense32_err_rel": rel_diff(dense32, dense64)})
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
