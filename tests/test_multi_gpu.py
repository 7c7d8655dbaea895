"""Two GPUs in one process: kernels load per device from one compile, and each product runs where its data is.

The registry holds one loaded kernel per (spec, device), while the disk cache
is keyed by arch: a second GPU of the same arch, or a second process, loads
what the first compiled.  Results are compared bit for bit with the CPU
engine on the same data as numpy arrays.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import tropical_gemm as tg
import tropical_gemm.jit as jit
from jit_helpers import fresh_default_registry, last_json_line, run_python
from reference import assert_same_bits
from strategies import operand_pair
from tropical_gemm.jit import cache as dc

pytestmark = [pytest.mark.gpu, pytest.mark.multi_gpu]

#: (semiring, dtype, (M, K, N), argmax): the square, small and skinny tile
#: families (skinny also transposed, N short), values alone and with argmax.
CASES = [
    ("max_plus", "float32", (2048, 256, 2048), False),
    ("max_plus", "float32", (1536, 128, 1536), True),
    ("min_plus", "float32", (300, 200, 260), True),
    ("max_plus", "int32", (7, 1000, 300), False),
    ("max_min", "int32", (500, 300, 5), True),
]


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


@pytest.fixture
def fresh_registry(cache_root):
    """The process-wide registry replaced by an empty one (nothing loaded on any device), over an empty cache."""
    with fresh_default_registry() as registry:
        yield registry


def same_arch(cp) -> None:
    archs = {cp.cuda.Device(d).compute_capability for d in (0, 1)}
    if len(archs) > 1:
        pytest.skip(f"GPUs 0 and 1 have different archs ({sorted(archs)}), so each compiles its own kernels")


def operands(dtype: str, shape: tuple[int, int, int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    return operand_pair(dtype, shape, seed, 0.05)


def check_on(cp, device: int, got, want) -> None:
    """``got`` (an array or a tuple of them, on ``device``) equals the CPU engine's ``want``."""
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    for g, w in zip(got, want, strict=True):
        assert g.device.id == device
        assert_same_bits(cp.asnumpy(g), w)


def test_a_kernel_compiles_once_and_loads_on_each_device(cp, fresh_registry):
    same_arch(cp)
    a, b = operands("float32", (1536, 128, 1536), seed=1)
    want = tg.matmul(a, b, "max_plus", argmax=True)
    with cp.cuda.Device(0):
        check_on(cp, 0, tg.matmul(cp.asarray(a), cp.asarray(b), "max_plus", argmax=True), want)
    first = jit.stats()
    assert first["compiled"] >= 1 and first["loads"] == first["compiled"] and first["disk_hits"] == 0
    with cp.cuda.Device(1):
        check_on(cp, 1, tg.matmul(cp.asarray(a), cp.asarray(b), "max_plus", argmax=True), want)
    second = jit.stats()
    assert second["compiled"] == first["compiled"]  # the disk cache is shared by GPUs of one arch
    assert second["loads"] - first["loads"] == first["loads"]  # but each device loads its own module
    assert second["disk_hits"] - first["disk_hits"] == first["loads"]
    assert second["kernels_in_memory"] == 2 * first["kernels_in_memory"]


@pytest.mark.parametrize("current", [0, 1])
def test_operands_on_device_1_compute_there_whichever_device_is_current(cp, current):
    a, b = operands("float32", (70, 90, 80), seed=2)
    grad_c = np.random.default_rng(3).standard_normal((70, 80)).astype("f4")
    want_c, want_k = tg.matmul(a, b, "max_plus", argmax=True)
    want_grads = tg.matmul_backward(grad_c, a, b, want_k, "max_plus")
    with cp.cuda.Device(1):
        a1, b1, g1 = cp.asarray(a), cp.asarray(b), cp.asarray(grad_c)
    with cp.cuda.Device(current):
        c = tg.matmul(a1, b1, "max_plus")
        c_k = tg.matmul(a1, b1, "max_plus", argmax=True)
        grads = tg.matmul_backward(g1, a1, b1, c_k[1], "max_plus", deterministic=True)
        assert cp.cuda.runtime.getDevice() == current
    check_on(cp, 1, c, want_c)
    check_on(cp, 1, c_k, (want_c, want_k))
    check_on(cp, 1, grads, want_grads)


def test_operands_on_different_devices_raise_value_error(cp):
    a, b = operands("float32", (4, 5, 3), seed=4)
    with cp.cuda.Device(0):
        a0, g0 = cp.asarray(a), cp.ones((4, 3), "f4")
    with cp.cuda.Device(1):
        b1, k1 = cp.asarray(b), cp.zeros((4, 3), "i4")
    with pytest.raises(ValueError, match=r"one GPU, got arrays on devices \[0, 1\]"):
        tg.matmul(a0, b1)
    with pytest.raises(ValueError, match=r"one GPU, got arrays on devices \[0, 1\]"):
        tg.matmul(a0, b1, argmax=True)
    with pytest.raises(ValueError, match=r"one GPU, got arrays on devices \[0, 1\]"):
        tg.matmul_backward(g0, a0, b1, k1)


def test_threads_driving_both_gpus_at_once_compile_each_kernel_once(cp, fresh_registry):
    """8 threads, 4 per GPU, start together on an empty cache and run every case many times."""
    same_arch(cp)
    inputs = [operands(dtype, shape, seed=10 + i) for i, (_, dtype, shape, _) in enumerate(CASES)]
    wants = [tg.matmul(a, b, sr, argmax=argmax) for (sr, _, _, argmax), (a, b) in zip(CASES, inputs)]

    def drive(thread: int) -> int:
        device = thread % 2
        with cp.cuda.Device(device):
            on_device = [(cp.asarray(a), cp.asarray(b)) for a, b in inputs]
            for _ in range(6):
                for (sr, _, _, argmax), (a, b), want in zip(CASES, on_device, wants):
                    check_on(cp, device, tg.matmul(a, b, sr, argmax=argmax), want)
        return device

    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(drive, range(8))) == [0] * 4 + [1] * 4
    counters = jit.stats()
    assert counters["kernels_in_memory"] == 2 * counters["compiled"]  # each spec: one compile, two loads
    assert counters["loads"] == counters["kernels_in_memory"]


ON_DEVICE_1 = """
import json
import cupy, numpy as np, tropical_gemm as tg
from test_multi_gpu import operands
a, b = operands("float32", (600, 64, 500), seed=5)
want_c, want_k = tg.matmul(a, b, "min_plus", argmax=True)
with cupy.cuda.Device(1):
    c, k = tg.matmul(cupy.asarray(a), cupy.asarray(b), "min_plus", argmax=True)
equal = bool(np.array_equal(c.get(), want_c, equal_nan=True) and np.array_equal(k.get(), want_k))
print(json.dumps({**tg.jit.stats(), "device": c.device.id, "equal": equal}))
"""


def test_a_fresh_process_on_device_1_loads_what_device_0_compiled(cp, fresh_registry, cache_root):
    same_arch(cp)
    a, b = operands("float32", (600, 64, 500), seed=5)
    with cp.cuda.Device(0):
        tg.matmul(cp.asarray(a), cp.asarray(b), "min_plus", argmax=True)
    compiled = jit.stats()["compiled"]
    assert compiled >= 1
    child = run_python(ON_DEVICE_1, {dc.ENV_CACHE_DIR: str(cache_root)})
    assert child.returncode == 0, child.stderr
    stats = last_json_line(child.stdout)
    assert stats["device"] == 1 and stats["equal"]
    assert stats["compiled"] == 0 and stats["disk_hits"] == compiled == stats["loads"]
