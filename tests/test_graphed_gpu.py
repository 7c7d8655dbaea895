"""``tropical_gemm.graphed`` on the GPU: each replay is the product of that call's arrays, bit for bit.

Also: the memory a capture allocates (outputs, K slices' and stream-K's
scratch) outlives it even where freed memory goes straight back to the
driver; a capture waits for the tuned kernels; work a graph cannot hold is
refused with a reason, and leaves the GPU usable; and torch's own
``torch.cuda.graph`` holds the torch ops.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tropical_gemm as tg
from reference import assert_same_bits
from test_cuda_engine import seasoned
from tropical_gemm.engines.cuda import gpu as cuda_gpu
from tropical_gemm.engines.cuda.plan import plan_forward
from tropical_gemm.graphs import GraphCaptureError

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


def expected(a, b, semiring: str, argmax: bool):
    """The CPU engine's product of the same values."""
    import cupy

    return tg.matmul(cupy.asnumpy(a), cupy.asnumpy(b), semiring, argmax=argmax)


def assert_product(got, want, argmax: bool) -> None:
    for g, w in zip(got, want) if argmax else [(got, want)]:
        assert_same_bits(g, w)


def operands(cp, rng, m: int, k: int, n: int, dtype: str, *, b_transposed: bool = False):
    a = cp.asarray(seasoned(rng, (m, k), dtype))
    b = cp.asarray(seasoned(rng, (n, k), dtype)).T if b_transposed else cp.asarray(seasoned(rng, (k, n), dtype))
    return a, b


@pytest.mark.parametrize("semiring,dtype,argmax,shape", [
    ("max_plus", "float32", False, (256, 256, 256)),
    ("max_plus", "float32", True, (37, 1, 129)),
    ("min_plus", "int32", True, (130, 70, 33)),
    ("max_times", "float64", False, (65, 200, 3)),
    ("max_min", "float32", True, (1, 300, 64)),
])
def test_each_replay_is_the_product_of_its_call(cp, semiring, dtype, argmax, shape):
    rng = np.random.default_rng(hash((semiring, dtype, argmax, shape)) % 2**32)
    a, b = operands(cp, rng, *shape, dtype, b_transposed=True)
    step = tg.graphed(lambda x, y: tg.matmul(x, y, semiring, argmax=argmax), a, b)
    assert_product(step.outputs, expected(a, b, semiring, argmax), argmax)
    for _ in range(3):  # fresh values each call, in the captured shapes and layouts
        a2, b2 = operands(cp, rng, *shape, dtype, b_transposed=True)
        got = step(a2, b2)
        assert got is step.outputs
        assert_product(got, expected(a2, b2, semiring, argmax), argmax)
    for out in step.outputs if argmax else [step.outputs]:
        out.data.memset_async(0, out.nbytes)
    assert_product(step(), expected(a2, b2, semiring, argmax), argmax)  # no arguments: the last call's inputs


@pytest.mark.parametrize("argmax", [False, True])
@pytest.mark.parametrize("shape", [(1000, 3000, 777), (64, 65536, 64)], ids=["wave-part-empty", "deep-k"])
def test_scratch_memory_outlives_the_capture(cp, shape, argmax):
    """With CuPy's pool off, freed memory goes back to the driver, which hands it to the next allocation:
    the captured scratch must still be the graph's when other arrays are allocated and written."""
    m, k, n = shape
    rng = np.random.default_rng(7)
    a, b = operands(cp, rng, m, k, n, "float32")
    plan = plan_forward(a.shape, (k, 1), b.shape, (n, 1), (), "float32", "max_plus", argmax,
                        cuda_gpu.sm_count(a.device.id), True)
    assert plan.splits > 1 or plan.scratch_bytes > 0, "the shape must take K slices or stream-K to test scratch"
    previous = cp.cuda.get_allocator()
    cp.cuda.set_allocator(None)
    try:
        step = tg.graphed(lambda x, y: tg.matmul(x, y, "max_plus", argmax=argmax), a, b)
        others = [cp.full(size, 7, dtype=cp.uint8) for size in (1 << 12, 1 << 16, 1 << 20, 1 << 24, 1 << 26)]
        for _ in range(2):
            a2, b2 = operands(cp, rng, m, k, n, "float32")
            assert_product(step(a2, b2), expected(a2, b2, "max_plus", argmax), argmax)
        assert all(int((x != 7).sum()) == 0 for x in others), "a replay wrote into memory the graph let go"
        del step
    finally:
        cp.cuda.set_allocator(previous)


#: A fresh process on an empty cache, tiering on: the first product runs the baseline kernel, and the graph must
#: hold the tuned one.  A baseline launch during the capture is a RuntimeWarning, made an error here.
_TIERED_CAPTURE = """
import json, warnings
import cupy as cp, numpy as np
import tropical_gemm as tg
warnings.simplefilter("error")
rng = np.random.default_rng(3)
a = cp.asarray(rng.normal(size=(300, 200)), dtype=cp.float32)
b = cp.asarray(rng.normal(size=(200, 500)), dtype=cp.float32)
step = tg.graphed(lambda x, y: tg.matmul(x, y, "min_plus"), a, b)
a2 = cp.asarray(rng.normal(size=(300, 200)), dtype=cp.float32)
got = cp.asnumpy(step(a2, b))
want = tg.matmul(cp.asnumpy(a2), cp.asnumpy(b), "min_plus")
print(json.dumps({**tg.jit.stats(), "equal": bool(np.array_equal(got, want))}, default=str))
"""


@pytest.mark.tiered
def test_a_capture_holds_the_tuned_kernels(tmp_path):
    """On an empty cache a first call runs the baseline kernel while the tuned one compiles; the warm-up
    waits for the compile, so that the graph holds the tuned kernel."""
    env = {**os.environ, "TROPICAL_GEMM_TIERED": "1", "TROPICAL_GEMM_CACHE_DIR": str(tmp_path / "tg"),
           "CUPY_CACHE_DIR": str(tmp_path / "cupy"), "CUDA_CACHE_DISABLE": "1"}
    done = subprocess.run([sys.executable, "-c", _TIERED_CAPTURE], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout.strip().splitlines()[-1])
    assert stats["baseline_launches"] >= 1, "the warm-up on an empty cache should have served the baseline"
    assert stats["tuned_swaps"] >= 1 and stats["pending_compiles"] == 0
    assert stats["equal"]


def test_host_products_are_refused_and_the_gpu_stays_usable(cp):
    a, b = operands(cp, np.random.default_rng(1), 16, 8, 16, "float32")
    host = cp.asnumpy(a)
    with pytest.raises(GraphCaptureError, match="captures GPU work only.*pass cupy arrays"):
        tg.graphed(lambda x, y: (tg.matmul(x, y), tg.matmul(host, host.T)), a, b)
    assert_product(tg.matmul(a, b), expected(a, b, "max_plus", False), False)


def test_a_read_on_the_host_is_refused_and_the_gpu_stays_usable(cp):
    a, b = operands(cp, np.random.default_rng(2), 16, 8, 16, "float32")
    with pytest.raises(GraphCaptureError, match="failed under capture|invalidated"):
        tg.graphed(lambda x, y: float(tg.matmul(x, y).max()), a, b)
    assert_product(tg.matmul(a, b), expected(a, b, "max_plus", False), False)


def test_replay_arguments_are_checked(cp):
    a, b = operands(cp, np.random.default_rng(4), 16, 8, 16, "float32")
    step = tg.graphed(lambda x, y, semiring: tg.matmul(x, y, semiring), a, b, "max_plus")
    with pytest.raises(ValueError, match=r"argument 1: the graph reads a float32 \(8, 16\) array, got float32 \(9, 16\)"):
        step(a, cp.zeros((9, 16), cp.float32), "max_plus")
    with pytest.raises(ValueError, match="argument 0: .* got float64"):
        step(a.astype(cp.float64), b, "max_plus")
    with pytest.raises(ValueError, match="argument 2 was captured as 'max_plus', got 'min_plus'"):
        step(a, b, "min_plus")
    with pytest.raises(TypeError, match="captured with 3 arguments, got 2"):
        step(a, b)
    assert_product(step(a, b, "max_plus"), expected(a, b, "max_plus", False), False)


def test_torch_cuda_graph_holds_the_torch_ops():
    torch = pytest.importorskip("torch")
    from tropical_gemm.torch import tropical_matmul

    rng = np.random.default_rng(5)
    a = torch.as_tensor(seasoned(rng, (1000, 3000), "float32"), device="cuda")  # stream-K: scratch in the graph
    b = torch.as_tensor(seasoned(rng, (3000, 777), "float32"), device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        tropical_matmul(a, b, "max_plus")  # warm-up: compiles, and the first prepared launch
    tg.jit.wait()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        c = tropical_matmul(a, b, "max_plus")
    for _ in range(2):
        a.copy_(torch.as_tensor(seasoned(rng, (1000, 3000), "float32")))
        graph.replay()
        assert_same_bits(c.cpu().numpy(), tg.matmul(a.cpu().numpy(), b.cpu().numpy(), "max_plus"))
