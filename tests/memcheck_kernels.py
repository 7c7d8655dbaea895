"""Launch one kernel of each family on awkward shapes, for compute-sanitizer to watch.

Not a pytest module: ``test_cuda_engine.test_kernels_pass_memcheck`` runs it
under ``compute-sanitizer --tool memcheck`` in a subprocess, so an
out-of-bounds access anywhere in these launches fails that test.
"""

import cupy as cp
import numpy as np

import tropical_gemm as tg
from tropical_gemm.engines.cuda import gpu as cuda_gpu
from tropical_gemm.engines.cuda import plan as planning


def launch_every_family() -> None:
    rng = np.random.default_rng(0)
    for (m, k, n), dtype in [((130, 9, 257), "float32"), ((67, 45, 133), "int32"), ((3, 70, 300), "float64"),
                             ((300, 70, 2), "int64"), ((2, 65, 129), "float32")]:
        a = cp.asarray(rng.integers(-9, 9, size=(m, k)).astype(dtype))
        b = cp.asarray(rng.integers(-9, 9, size=(k, n)).astype(dtype))
        c, idx = tg.matmul(a, b, "max_plus", argmax=True)
        tg.matmul(cp.asfortranarray(a), b[:, ::-1], "min_max")
        tg.matmul(a, b, "min_plus")  # integers: the predicated stores of the square kernel's edge tiles
        if a.dtype.kind == "f":
            for deterministic in (False, True):
                tg.matmul_backward(cp.ones_like(c), a, b, idx, "max_mul", deterministic=deterministic)
    batch_a = cp.asarray(rng.normal(size=(3, 1, 20, 30)).astype("f4"))
    batch_b = cp.asarray(rng.normal(size=(2, 30, 25)).astype("f4"))
    c, idx = tg.matmul(batch_a, batch_b, argmax=True)
    tg.matmul_backward(cp.ones_like(c), batch_a, batch_b, idx, deterministic=True)
    cp.cuda.Device().synchronize()


def launch_stream_k() -> None:
    """Stream-K products, ragged, in every dtype (run with stream-K wherever the planner allows it)."""
    rng = np.random.default_rng(1)
    for (m, k, n), dtype in [((300, 2003, 260), "float32"), ((200, 2001, 130), "int32"), ((150, 1803, 70), "float64"),
                             ((70, 1201, 90), "int64")]:
        a = cp.asarray(rng.integers(-9, 9, size=(m, k)).astype(dtype))
        b = cp.asarray(rng.integers(-9, 9, size=(k, n)).astype(dtype))
        tg.matmul(a, b, "max_plus", argmax=True)
        tg.matmul(cp.asfortranarray(a), b[:, ::-1], "min_max")
    cp.cuda.Device().synchronize()


def main() -> None:
    """Each shape as the engine picks its family, then with the square family forced (one SM reported, the
    square tiles taken however much of them lies outside C), then stream-K (32 SMs reported, stream-K
    wherever it may run)."""
    launch_every_family()
    cuda_gpu.sm_count = lambda device_id: 1
    planning._USEFUL = {}
    launch_every_family()
    cuda_gpu.sm_count = lambda device_id: 32
    planning._SQUARE_FILLED = 1.01
    launch_stream_k()


if __name__ == "__main__":
    main()
