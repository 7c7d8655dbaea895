"""One first call per process, for tests/test_first_call.py: ``python first_call_cases.py CASE``.

Runs every call of CASE in this fresh process (tiered or not, as
``TROPICAL_GEMM_TIERED`` says), checks the results against the CPU engine
bit for bit, waits for the background compiles, runs the calls again on the
tuned kernels and checks the same bits, and prints one JSON line: the
files in ``CUPY_CACHE_DIR`` (CuPy's own compiles: there must be none),
whether cupyx or scipy were imported, and the registry's counters.  The
test code itself launches nothing on the GPU: operands are made on the host
and copied, results copied back.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from reference import assert_same_bits
from strategies import operand_pair, random_values

#: (M, K, N): the square family with K slices, the small family, the skinny family, K = 0.
SHAPES = {"split_k": (768, 1024, 768), "small": (200, 256, 256), "skinny": (8, 300, 512), "k0": (5, 0, 7)}
SEMIRINGS = {"float32": "max_plus", "float64": "min_plus", "int32": "max_min", "int64": "max_plus"}


def product_calls(dtype: str):
    """(label, function of the tg module and an upload function -> host arrays) for every forward path."""
    semiring = SEMIRINGS[dtype]
    calls = []
    for label, shape in SHAPES.items():
        a, b = operand_pair(dtype, shape, seed=len(label), special_rate=0.05)
        calls.append((f"{label}", a, b, dict(semiring=semiring)))
        calls.append((f"{label}-argmax", a, b, dict(semiring=semiring, argmax=True)))
    rng = np.random.default_rng(7)  # a batch of A against one B: B broadcasts
    a3, b3 = random_values(rng, (3, 64, 96), dtype, 0.05), random_values(rng, (96, 80), dtype, 0.05)
    calls.append(("batched-argmax", a3, b3, dict(semiring=semiring, argmax=True)))
    return calls


_WANT: dict = {}  # CPU results, computed once per call for both runs


def run_products(tg, cupy, dtype: str, *, out: bool) -> list:
    results = []
    for label, a, b, kwargs in product_calls(dtype):
        da, db = cupy.asarray(a), cupy.asarray(b)
        if label not in _WANT:
            _WANT[label] = tg.matmul(a, b, **kwargs)
        want = _WANT[label]
        if out:  # out= buffers: fresh cupy arrays, written by the engine
            got_out = ((cupy.empty(want[0].shape, want[0].dtype), cupy.empty(want[1].shape, want[1].dtype))
                       if kwargs.get("argmax") else cupy.empty(want.shape, want.dtype))
            got = tg.matmul(da, db, out=got_out, **kwargs)
        else:
            got = tg.matmul(da, db, **kwargs)
        got = tuple(x.get() for x in got) if isinstance(got, tuple) else (got.get(),)
        for g, w in zip(got, want if isinstance(want, tuple) else (want,)):
            assert_same_bits(g, w)
        results.append(got)
    return results


def run_backward(tg, cupy, dtype: str) -> list:
    """matmul_backward on the GPU with a transposed grad_c and an int64 argmax: both gathered by our kernels."""
    a, b = operand_pair(dtype, (96, 128, 64), seed=11, special_rate=0.0)
    c, k = tg.matmul(a, b, "max_plus", argmax=True)
    grad_c = np.random.default_rng(5).standard_normal(c.shape).astype(dtype)
    grad_c_t = cupy.asarray(np.ascontiguousarray(grad_c.T)).T  # a view: not C-contiguous
    got = tg.matmul_backward(grad_c_t, cupy.asarray(a), cupy.asarray(b), cupy.asarray(k.astype(np.int64)),
                             "max_plus", deterministic=True)
    want = tg.matmul_backward(grad_c, a, b, k, "max_plus", deterministic=True)
    for g, w in zip(got, want):
        assert_same_bits(g, w)
    return [tuple(g.get() for g in got)]


def run_torch(dtype: str) -> list:
    import torch

    from tropical_gemm.torch import tropical_matmul, tropical_matmul_with_argmax

    results = []
    for label in ("split_k", "small"):
        a, b = operand_pair(dtype, SHAPES[label], seed=2, special_rate=0.0)
        grads = []
        for device in ("cuda", "cpu"):
            ta = torch.tensor(a, device=device, requires_grad=True)
            tb = torch.tensor(b, device=device, requires_grad=True)
            values = tropical_matmul(ta, tb, "max_plus")
            values2, argmax = tropical_matmul_with_argmax(ta, tb, "min_plus")
            (values.sum() + values2.sum()).backward()
            grads.append([x.detach().cpu().numpy() for x in (values, values2, argmax, ta.grad, tb.grad)])
        for g, w in zip(*grads):
            if g.dtype.kind == "f":  # atomics order the float sums differently from the CPU engine
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
            else:
                assert_same_bits(g, w)
        results.append(grads[0][:3])  # values and argmax: exact on every tier
    return results


def run_einsum(tg, cupy) -> list:
    """A contraction whose steps need a permuted copy, a ⊕-reduction and the configuration walk (on the GPU)."""
    rng = np.random.default_rng(3)
    x, y = random_values(rng, (6, 5, 7), "float32", 0.0), random_values(rng, (7, 6, 4), "float32", 0.0)
    got, config = tg.einsum("ijk,kil->jl", cupy.asarray(x), cupy.asarray(y), return_configuration=True)
    want, want_config = tg.einsum("ijk,kil->jl", x, y, return_configuration=True)
    assert_same_bits(got.get(), want)
    chain = [random_values(rng, s, "float32", 0.05) for s in [(9, 8), (8, 7), (7, 6)]]  # the GPU walk
    got_chain, chain_config = tg.einsum("ij,jk,kl->il", *map(cupy.asarray, chain), return_configuration=True)
    want_chain, want_chain_config = tg.einsum("ij,jk,kl->il", *chain, return_configuration=True)
    assert_same_bits(got_chain.get(), want_chain)
    for name in want_chain_config:
        assert_same_bits(chain_config[name].get(), want_chain_config[name])
    reduced = tg.einsum("ijk->j", cupy.asarray(x), semiring="min_plus")
    assert_same_bits(reduced.get(), tg.einsum("ijk->j", x, semiring="min_plus"))
    return [(got.get(), reduced.get())]


def run_half(tg, cupy) -> list:
    """float16 storage: the widen and narrow casts are registry kernels, the product the float32 one."""
    rng = np.random.default_rng(4)
    a = random_values(rng, (70, 90), "float32", 0.05).astype(np.float16)
    b = random_values(rng, (90, 50), "float32", 0.05).astype(np.float16)
    got = tg.matmul(cupy.asarray(a), cupy.asarray(np.ascontiguousarray(b.T)).T, "max_plus", argmax=True)
    want = tg.matmul(a, b, "max_plus", argmax=True)
    for g, w in zip(got, want):
        assert_same_bits(g.get(), w)
    return [tuple(g.get() for g in got)]


def main(case: str) -> None:
    if case == "torch":
        # A torch user imports torch first.  ``import torch`` after cupy imports
        # cupyx submodules itself (torch probes cupy), which is not ours to count.
        import torch  # noqa: F401
    # The references come from the numpy engine (tests/numpy_engine.py, which the
    # CPU engine matches bit for bit in test_cpu_engine.py): the CPU engine's
    # numba imports scipy, and what this process imports must be the GPU path's.
    import numpy_engine

    import tropical_gemm.engines.cpu as cpu_engine

    cpu_engine.forward = numpy_engine.forward  # every caller looks it up on the module at call time
    import cupy

    import tropical_gemm as tg
    import tropical_gemm.jit as jit

    cupy.cuda.Device(0).use()
    cupy.empty(1)  # the CUDA context: not part of a first call

    def run() -> list:
        if case == "torch":
            return run_torch("float32")
        if case == "einsum":
            return run_einsum(tg, cupy)
        if case == "half":
            return run_half(tg, cupy)
        if case == "backward":
            return run_backward(tg, cupy, "float32") + run_backward(tg, cupy, "float64")
        dtype, _, variant = case.partition("-")
        return run_products(tg, cupy, dtype, out=variant == "out")

    first = run()
    cupy.cuda.Device(0).synchronize()
    stats_first = jit.stats()
    assert jit.wait(300)
    again = run()
    for x, y in zip(first, again):
        for g, w in zip(x, y):
            assert_same_bits(g, w)
    cupy_cache = Path(os.environ["CUPY_CACHE_DIR"])
    print(json.dumps({
        "case": case,
        "cupy_cache_files": sorted(str(p) for p in cupy_cache.rglob("*")) if cupy_cache.exists() else [],
        # ``import cupy`` imports the bare cupyx package itself; its submodules
        # (cupyx.scipy pulls in scipy.sparse: 0.6 s) are what a product must not import
        "cupyx_submodules": sorted(m for m in sys.modules if m.startswith("cupyx.")),
        "scipy": "scipy" in sys.modules,
        "baseline_launches": stats_first["baseline_launches"], "tuned_swaps": jit.stats()["tuned_swaps"],
        "compiled": jit.stats()["compiled"], "background_failures": jit.stats()["background_failures"],
    }))


if __name__ == "__main__":
    main(sys.argv[1])
