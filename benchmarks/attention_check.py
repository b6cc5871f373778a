"""The device check behind docs/devices-measured.md's "causal attention": does a fused attention kernel
with a causal mask take half the time of the same kernel without one, as symcost prices it (the serving
prefill's attention, and training's with ``--attention flash``: ``pricing.masked_half``)?

    python3 benchmarks/attention_check.py [--quick] [--out FILE]

LLaMA 3 8B's attention (32 query heads sharing 8 key-value heads of 128), one sequence of T tokens, bf16,
through ``jax.nn.dot_product_attention`` (cuDNN's fused kernel on a GPU, and XLA's einsums at the
shorter lengths: they compute every score and then mask; XLA's alone elsewhere). Forward alone, then
forward and backward (the gradient of the output's sum with respect to Q, K and V). FLOPs counted for
the whole square: 4 T^2 N H forward, 2.5 times that forward and backward (the backward's four products
and the recomputed scores).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def _timed(fn, args, runs: int) -> float:
    import jax
    jax.block_until_ready(fn(*args))            # compile and warm up
    jax.block_until_ready(fn(*args))
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a rehearsal on a CPU)")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", help="write the rows as JSON here too")
    a = ap.parse_args(argv)
    import jax
    import jax.numpy as jnp
    gpu = jax.devices()[0].platform == "gpu"
    kernels = ("cudnn", "xla") if gpu else ("xla",)
    n, g, h = (32, 8, 128) if not a.quick else (4, 2, 16)
    seqs = (2048, 8192, 32768) if not a.quick else (128,)
    print(f"device: {jax.devices()[0].device_kind}   jax {jax.__version__}   kernels: {', '.join(kernels)}   heads {n} "
          f"(kv {g}) of {h}, batch 1, bf16, median of {a.runs}")
    rows = []
    for impl, t in [(i, t) for i in kernels for t in seqs if i == kernels[0] or t <= seqs[min(1, len(seqs) - 1)]]:
        key = jax.random.PRNGKey(t)
        kq, kk, kv = jax.random.split(key, 3)
        q = jax.random.normal(kq, (1, t, n, h), jnp.bfloat16)
        k = jax.random.normal(kk, (1, t, g, h), jnp.bfloat16)
        v = jax.random.normal(kv, (1, t, g, h), jnp.bfloat16)
        flops = 4.0 * t * t * n * h
        for what, mult in (("forward", 1.0), ("forward+backward", 2.5)):
            times = {}
            for causal in (False, True):
                def fwd(q, k, v, causal=causal, impl=impl):
                    return jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation=impl)
                if what == "forward":
                    fn = jax.jit(fwd)
                else:
                    fn = jax.jit(jax.grad(lambda q, k, v, f=fwd: f(q, k, v).astype(jnp.float32).sum(),
                                          argnums=(0, 1, 2)))
                try:
                    times[causal] = _timed(fn, (q, k, v), a.runs)
                except Exception as e:              # a size the kernel refuses: say so and go on
                    print(f"  T={t} {what} causal={causal}: {type(e).__name__}: {str(e)[:200]}")
            if len(times) == 2:
                row = {"kernel": impl, "tokens": t, "pass": what, "full_s": times[False], "causal_s": times[True],
                       "ratio": times[True] / times[False],
                       "full_tflops": mult * flops / times[False] / 1e12,
                       "causal_tflops": mult * flops / 2 / times[True] / 1e12}
                rows.append(row)
                print(f"  {impl:<5} T={t:>6}  {what:<17} full {times[False] * 1e3:8.3f} ms "
                      f"({row['full_tflops']:6.1f} TFLOP/s)"
                      f"   causal {times[True] * 1e3:8.3f} ms ({row['causal_tflops']:6.1f} TFLOP/s on half)"
                      f"   causal/full {row['ratio']:.3f}  (symcost: 0.5)")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"device": jax.devices()[0].device_kind, "jax": jax.__version__,
                       "rows": rows}, f, indent=1)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
