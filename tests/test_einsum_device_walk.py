"""einsum's configuration walk on the GPU (``einsum.device_walk``, the registry's ``walk`` kernel) against the host
walk (``backtrack.walk``), the reference, bit for bit.

On the CPU the kernel's table is run by ``emulate``, a line-by-line Python
reading of ``cuda_src/walk.cu`` over numpy arrays standing in for device
memory, so the table's layout and the walk's dead-element rule are checked
without a GPU; the GPU tests compare the kernel itself.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

import tropical_gemm as tg
from tropical_gemm.einsum import parse_call, backtrack, einsum_plan
from tropical_gemm.einsum.device_walk import HEADER, encode, plan_walk
from tropical_gemm.einsum.lower import array_ops, execute
from tropical_gemm.semirings import get_semiring, semirings

#: Multi-step einsums (subscripts, shapes, optimize): batch labels, labels contracted at different steps,
#: two labels chosen by one step, a reduction before the products, an outer product last (the zero read from the
#: result), a cycle, a step read through labels that may be unwon, an empty contraction.
CASES = [
    ("ij,jk,kl,lm->im", [(4, 5), (5, 6), (6, 3), (3, 4)], [(0, 1), (0, 1), (0, 1)]),
    ("ij,jk,kl,lm->im", [(4, 5), (5, 6), (6, 3), (3, 4)], "greedy"),
    ("ij,jk,kl,lm,mn->in", [(3, 4), (4, 5), (5, 6), (6, 2), (2, 3)], [(2, 3), (0, 1), (0, 1), (0, 1)]),
    ("bij,bjk,bkl->bil", [(2, 3, 4), (2, 4, 5), (2, 5, 3)], "greedy"),
    ("bij,bjk,bkl->lbi", [(2, 3, 4), (2, 4, 5), (2, 5, 3)], [(1, 2), (0, 1)]),
    ("ijk,jkl,lm->im", [(3, 4, 2), (4, 2, 5), (5, 3)], [(0, 1), (0, 1)]),
    ("ijx,jk->ik", [(3, 4, 3), (4, 5)], "greedy"),
    ("ij,jk,l->ikl", [(3, 4), (4, 2), (3,)], [(0, 1), (0, 1)]),
    ("ab,bc,cd,da->ac", [(3, 4), (4, 3), (3, 5), (5, 3)], "greedy"),
    ("jm,mk,j,ki->i", [(2, 2), (2, 3), (2,), (3, 2)], [(0, 1), (0, 2), (0, 1)]),
    ("ijk,kil->jl", [(3, 4, 5), (5, 3, 2)], "greedy"),
    ("ij,jk,kl->il", [(3, 0), (0, 4), (4, 2)], [(0, 1), (0, 1)]),
    # scalar outputs (a network's optimum): one element walks every step
    ("ij,jk,kl->", [(4, 5), (5, 6), (6, 3)], [(0, 1), (0, 1)]),
    ("a,ab,bc,cd->", [(3,), (3, 4), (4, 5), (5, 2)], "greedy"),
    ("ab,bc,ca->", [(3, 4), (4, 2), (2, 3)], "greedy"),
    ("ij,jk,k->", [(3, 0), (0, 4), (4,)], [(0, 1), (0, 1)]),
]


def random_einsum(rng: np.random.Generator) -> tuple[str, list, list]:
    """A random network: 2 to 5 operands over 7 labels of sizes 1 to 4, an output of 0 to 3 labels, a random path."""
    sizes = dict(zip("abcdefg", rng.choice([1, 2, 3, 4], size=7, p=[0.1, 0.3, 0.3, 0.3])))
    terms = ["".join(rng.choice(list(sizes), size=rng.integers(1, 4), replace=False))
             for _ in range(rng.integers(2, 6))]
    used = sorted(set("".join(terms)))
    output = "".join(rng.choice(used, size=rng.integers(0, min(3, len(used)) + 1), replace=False))
    path = [tuple(int(p) for p in rng.choice(live, size=2, replace=False)) for live in range(len(terms), 1, -1)]
    return f"{','.join(terms)}->{output}", [tuple(int(sizes[c]) for c in t) for t in terms], path


def operands(rng: np.random.Generator, shapes: list, dtype: str, semiring: str) -> list[np.ndarray]:
    """Small integers (ties likely), with a few of the semiring's zero so that some outputs are dead."""
    low = 0 if semiring == "max_mul" else -3
    ops = [rng.integers(low, 4, size=s).astype(dtype) for s in shapes]
    zero = get_semiring(semiring).zero(np.dtype(dtype))
    for x in ops:
        if x.size:
            x.reshape(-1)[rng.integers(0, x.size, size=max(1, x.size // 6))] = zero
    if ops[0].size:
        ops[0][rng.integers(0, ops[0].shape[0])] = zero  # a whole slice: dead outputs, or a value never chosen
    return ops


def host_walk(subscripts: str, ops: list, semiring: str, optimize) -> tuple:
    """The plan, the parse, the CPU result and argmaxes, and the host walk's configuration."""
    plan = einsum_plan(subscripts, *ops, optimize=optimize)
    parsed, _ = parse_call(subscripts, tuple(ops))
    sr = get_semiring(semiring)
    result, argmaxes = execute(plan, parsed, ops, array_ops("cpu"), sr, True)
    want = backtrack.walk(plan, parsed, argmaxes, lambda: result == sr.zero(result.dtype))
    return plan, parsed, result, argmaxes, want


def emulate(table: np.ndarray, memory: dict[int, np.ndarray], result: np.ndarray, zero) -> None:
    """``cuda_src/walk.cu`` in Python: ``memory`` maps each address in the table to a flat array."""
    rank, steps, labels, all_dead, check_zero, _ = map(int, table[:HEADER])
    sizes, strides = table[HEADER:HEADER + rank], table[HEADER + rank:HEADER + 2 * rank]
    result_strides = table[HEADER + 2 * rank:HEADER + 3 * rank]
    addresses = table[HEADER + 3 * rank:HEADER + 3 * rank + labels]
    chosen = table[HEADER + 3 * rank + labels:HEADER + 3 * rank + 2 * labels]
    # the kernel reads RESULT at sum(coordinate * stride): the strides must be the result's own, in elements
    assert tuple(result_strides) == tuple(st // result.itemsize for st in result.strides)
    for e in range(int(np.prod(sizes))):
        coordinate = [(e // int(strides[d])) % int(sizes[d]) for d in range(rank)]
        dead = bool(all_dead) or bool(check_zero) and result[tuple(coordinate)] == zero
        cursor = HEADER + 3 * rank + 2 * labels
        for _ in range(steps):
            if dead:
                break
            address, _, size, reads, writes = map(int, table[cursor:cursor + 5])
            flat = 0
            for r in range(reads):
                source, stride = map(int, table[cursor + 5 + 2 * r:cursor + 7 + 2 * r])
                known = int(memory[int(addresses[source])][e]) if source >= 0 else coordinate[-1 - source]
                flat += known * stride
            flat = int(memory[address][flat % size])
            if flat < 0:
                dead = True
                break
            out = cursor + 5 + 2 * reads
            for w in reversed(range(writes)):
                slot, k = map(int, table[out + 2 * w:out + 2 * w + 2])
                flat, memory[int(addresses[slot])][e] = divmod(flat, k)
            cursor = out + 2 * writes
        for j in range(labels):
            if dead or not chosen[j]:
                memory[int(addresses[j])][e] = -1 if dead else 0


def emulated_walk(plan, parsed, argmaxes: list, result: np.ndarray, semiring: str) -> dict:
    """The device walk's table, run by ``emulate`` on host arrays: addresses are keys of ``memory``."""
    walk = plan_walk(plan, parsed)
    dtype = backtrack.config_dtype(plan)
    config = [np.full(result.shape, 99, dtype=dtype) for _ in walk.labels]  # 99: never written would show
    memory = {1000 + t: np.ascontiguousarray(idx).reshape(-1) for t, idx in enumerate(argmaxes) if idx is not None}
    memory.update({2000 + j: c.reshape(-1) for j, c in enumerate(config)})
    addresses = {s.index: (1000 + s.index, argmaxes[s.index].dtype == np.int64) for s in walk.steps}
    table = encode(walk, result.shape, tuple(st // result.itemsize for st in result.strides), addresses,
                   [2000 + j for j in range(len(config))], dtype == np.int64)
    emulate(table, memory, result, get_semiring(semiring).zero(result.dtype))
    return dict(zip(walk.names, config))


@pytest.mark.parametrize("subscripts, shapes, optimize", CASES)
@pytest.mark.parametrize("semiring", ["max_plus", "min_plus", "max_mul"])
def test_the_kernels_table_walks_as_the_host_does(subscripts, shapes, optimize, semiring):
    rng = np.random.default_rng(len(subscripts) + len(semiring))
    for dtype in ("float64", "int32"):
        for _ in range(3):
            ops = operands(rng, shapes, dtype, semiring)
            plan, parsed, result, argmaxes, want = host_walk(subscripts, ops, semiring, optimize)
            got = emulated_walk(plan, parsed, argmaxes, result, semiring)
            assert list(got) == list(want)
            for name in want:
                assert got[name].dtype == want[name].dtype
                np.testing.assert_array_equal(got[name], want[name], err_msg=f"{subscripts} {name}")


def test_the_plan_reads_output_axes_and_known_labels_and_checks_the_zero_only_without_a_root_choice():
    ops = [np.ones((3, 4)), np.ones((4, 2)), np.ones(3)]
    for subscripts, optimize, check_zero in [("ij,jk,l->ikl", [(0, 1), (0, 1)], True),
                                             ("ij,jk,l->ikl", [(0, 2), (0, 1)], False)]:
        plan = einsum_plan(subscripts, *ops, optimize=optimize)
        walk = plan_walk(plan, parse_call(subscripts, tuple(ops))[0])
        assert walk.check_zero is check_zero and walk.names == ("j",) and walk.chosen == (True,)
        assert not walk.all_dead and [w for s in walk.steps for w in s.writes] == [(0, 4)]
    empty = [np.ones((3, 0)), np.ones((0, 4))]
    assert plan_walk(einsum_plan("ij,jk->ik", *empty), parse_call("ij,jk->ik", tuple(empty))[0]).all_dead



@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_every_walk_kernel_compiles_to_a_cubin_for_sm_90(dtype):
    from tropical_gemm.jit import catalogue, kernel_source, make_spec
    from tropical_gemm.jit.compiler import compile_program, resolve_target
    from tropical_gemm.jit.source import kernel_options

    spec = make_spec("walk", "min_plus", dtype)
    assert spec.name == f"tg_walk_{dtype[0]}{dtype[-2:]}" and spec in catalogue(ops=["walk"])
    result = compile_program(kernel_source(spec), spec.name, resolve_target("sm_90"), kernel_options(spec))
    assert result.binary[:4] == b"\x7fELF" and spec.name.encode() in result.binary


@pytest.mark.torch
def test_cpu_tensors_walk_on_the_host_as_numpy_arrays_do():
    """The host walk of torch tensors, an outer product last included (its zero read from a torch result)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(26)
    for subscripts, shapes, optimize in CASES:
        ops = operands(rng, shapes, "float32", "max_plus")
        _, config = tg.einsum(subscripts, *map(torch.from_numpy, ops), optimize=optimize, return_configuration=True)
        _, want = tg.einsum(subscripts, *ops, optimize=optimize, return_configuration=True)
        assert_same_config(config, want, lambda t: t.numpy())


# ------------------------------------------------------------------------- GPU


def gpu_walks(subscripts: str, ops: list, semiring: str, optimize) -> tuple[dict, dict]:
    """The device walk and the host walk over the same GPU argmaxes (copied to the host for the latter)."""
    import cupy

    from tropical_gemm.einsum.device_walk import device_walk

    plan = einsum_plan(subscripts, *ops, optimize=optimize)
    parsed, _ = parse_call(subscripts, tuple(ops))
    sr = get_semiring(semiring)
    result, argmaxes = execute(plan, parsed, [cupy.asarray(x) for x in ops], array_ops("cuda"), sr, True)
    got = device_walk(plan, parsed, argmaxes, result, sr)
    host = backtrack.host_argmaxes(argmaxes, cupy.asnumpy)
    want = backtrack.walk(plan, parsed, host, lambda: cupy.asnumpy(result) == sr.zero(result.dtype))
    return got, want


def assert_same_config(got: dict, want: dict, to_host) -> None:
    assert list(got) == list(want)
    for name in want:
        value = to_host(got[name])
        assert value.dtype == want[name].dtype and value.flags.c_contiguous
        np.testing.assert_array_equal(value, want[name], err_msg=str(name))


@pytest.mark.gpu
@pytest.mark.parametrize("semiring", semirings())
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_gpu_device_walk_equals_the_host_walk(semiring, dtype):
    import cupy

    rng = np.random.default_rng(21)
    for subscripts, shapes, optimize in CASES + [random_einsum(rng) for _ in range(10)]:
        ops = operands(rng, shapes, dtype, semiring)
        got, want = gpu_walks(subscripts, ops, semiring, optimize)
        assert_same_config(got, want, cupy.asnumpy)
        cpu_value, cpu_config = tg.einsum(subscripts, *ops, semiring=semiring, optimize=optimize,
                                          return_configuration=True)
        assert_same_config(got, cpu_config, cupy.asnumpy)  # the GPU's argmaxes are the CPU's


@pytest.mark.gpu
def test_gpu_device_walk_on_larger_networks_and_wide_indices(monkeypatch):
    """Grids of many blocks, a 6-d output, int64 argmaxes and int64 configurations (as for K >= 2**31)."""
    import cupy

    from tropical_gemm.einsum import device_walk as module

    rng = np.random.default_rng(22)
    big = [("ij,jk,kl,lm,mn->in", [(300, 40), (40, 50), (50, 60), (60, 30), (30, 200)], "greedy"),
           ("abc,cd,de,efg,gh->abfh", [(5, 6, 7), (7, 8), (8, 9), (9, 4, 5), (5, 6)], "greedy"),
           ("abcdef,fg,gh->abcdeh", [(2, 3, 2, 3, 2, 5), (5, 4), (4, 3)], [(1, 2), (0, 1)])]
    for subscripts, shapes, optimize in big:
        ops = operands(rng, shapes, "float32", "max_plus")
        got, want = gpu_walks(subscripts, ops, "max_plus", optimize)
        assert_same_config(got, want, cupy.asnumpy)
    subscripts, shapes, optimize = CASES[2]
    ops = operands(rng, shapes, "int64", "min_plus")
    got, want = gpu_walks(subscripts, ops, "min_plus", optimize)
    plan = einsum_plan(subscripts, *ops, optimize=optimize)
    parsed, _ = parse_call(subscripts, tuple(ops))
    sr = get_semiring("min_plus")
    result, argmaxes = execute(plan, parsed, [cupy.asarray(x) for x in ops], array_ops("cuda"), sr, True)
    wide = [None if idx is None else cupy.asarray(cupy.asnumpy(idx).astype(np.int64)) for idx in argmaxes]
    monkeypatch.setattr(module.backtrack, "config_dtype", lambda plan: np.dtype(np.int64))
    wide_config = module.device_walk(plan, parsed, wide, result, sr)
    assert_same_config(wide_config, {k: v.astype(np.int64) for k, v in want.items()}, cupy.asnumpy)


@pytest.mark.gpu
@pytest.mark.torch
def test_gpu_device_walk_for_torch_tensors():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(23)
    for semiring in ("max_plus", "min_plus"):
        for subscripts, shapes, optimize in CASES:
            ops = operands(rng, shapes, "float32", semiring)
            tensors = [torch.tensor(x, device="cuda", requires_grad=True) for x in ops]
            value, config = tg.einsum(subscripts, *tensors, semiring=semiring, optimize=optimize,
                                      return_configuration=True)
            _, want = tg.einsum(subscripts, *ops, semiring=semiring, optimize=optimize, return_configuration=True)
            assert all(c.is_cuda for c in config.values())
            assert_same_config(config, want, lambda t: t.cpu().numpy())


WALKS_IN_A_FRESH_PROCESS = """
    import json, os, pathlib
    import numpy as np, cupy, tropical_gemm as tg
    from test_einsum_device_walk import CASES, operands
    rng = np.random.default_rng(24)
    for dtype in ("float32", "int64"):
        for subscripts, shapes, optimize in CASES:
            ops = operands(rng, shapes, dtype, "max_plus")
            got = tg.einsum(subscripts, *map(cupy.asarray, ops), optimize=optimize, return_configuration=True)[1]
            want = tg.einsum(subscripts, *ops, optimize=optimize, return_configuration=True)[1]
            assert all((cupy.asnumpy(got[k]) == want[k]).all() for k in want)
    cache = pathlib.Path(os.environ["CUPY_CACHE_DIR"])
    print(json.dumps(sorted(str(p) for p in cache.rglob("*")) if cache.exists() else []))
"""


@pytest.mark.gpu
def test_gpu_device_walk_compiles_nothing_of_cupys_own(tmp_path):
    from jit_helpers import last_json_line, run_python

    env = {"CUPY_CACHE_DIR": str(tmp_path / "cupy"), "TROPICAL_GEMM_CACHE_DIR": str(tmp_path / "ours")}
    result = run_python(WALKS_IN_A_FRESH_PROCESS, env, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert last_json_line(result.stdout) == [], "CuPy compiled kernels of its own"


#: cuda_src/walk.cu as host C++: one "thread", whose grid-stride loop covers every element.
HOST_SHIM = """
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __restrict__
typedef long long i64;
struct Dim { i64 x; };
static Dim blockIdx = {0}, threadIdx = {0}, blockDim = {1}, gridDim = {1};
"""
_HOST_TYPES = {"float32": ("float", ctypes.c_float), "float64": ("double", ctypes.c_double),
               "int32": ("int", ctypes.c_int32), "int64": ("long long", ctypes.c_int64)}


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory) -> dict:
    """The walk kernel of each dtype, compiled for the host by the system's C++ compiler (skip without one)."""
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler to build cuda_src/walk.cu for the host")
    from string import Template

    from tropical_gemm.jit.source import read_cuda_file

    folder = tmp_path_factory.mktemp("walk")
    kernels = {}
    for dtype, (c_type, arg_type) in _HOST_TYPES.items():
        source = folder / f"walk_{dtype}.cpp"
        source.write_text(HOST_SHIM + Template(read_cuda_file("walk.cu")).substitute(name="walk", threads=1, T=c_type))
        subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-o", str(source.with_suffix(".so")), str(source)],
                       check=True)
        function = ctypes.CDLL(str(source.with_suffix(".so"))).walk
        function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, arg_type, ctypes.c_int64]
        kernels[dtype] = function
    return kernels


def host_kernel_walk(kernels: dict, plan, parsed, argmaxes: list, result: np.ndarray, semiring: str,
                     wide: bool) -> dict:
    """The walk kernel on host memory; ``wide``: int64 argmaxes and configuration (as for K >= 2**31)."""
    walk = plan_walk(plan, parsed)
    dtype = np.dtype(np.int64) if wide else backtrack.config_dtype(plan)
    config = [np.full(result.shape, 99, dtype=dtype) for _ in walk.labels]
    held = {s.index: np.ascontiguousarray(argmaxes[s.index], dtype=np.int64 if wide else None) for s in walk.steps}
    table = encode(walk, result.shape, tuple(st // result.itemsize for st in result.strides),
                   {t: (idx.ctypes.data, idx.dtype == np.int64) for t, idx in held.items()},
                   [c.ctypes.data for c in config], wide)
    kernels[result.dtype.name](table.ctypes.data, result.ctypes.data if result.size else None,
                               get_semiring(semiring).zero(result.dtype).item(), result.size)
    return dict(zip(walk.names, config))


@pytest.mark.parametrize("semiring", semirings())
def test_the_kernel_compiled_for_the_host_walks_as_the_host_does(host_kernels, semiring):
    """cuda_src/walk.cu itself (not a reading of it), on every dtype, int32 and int64 indices."""
    rng = np.random.default_rng(25)
    for dtype in _HOST_TYPES:
        for subscripts, shapes, optimize in CASES + [random_einsum(rng) for _ in range(40)]:
            ops = operands(rng, shapes, dtype, semiring)
            plan, parsed, result, argmaxes, want = host_walk(subscripts, ops, semiring, optimize)
            for wide in (False, True):
                got = host_kernel_walk(host_kernels, plan, parsed, argmaxes, result, semiring, wide)
                assert list(got) == list(want)
                for name in want:
                    np.testing.assert_array_equal(got[name], want[name], err_msg=f"{subscripts} {dtype} {name}")
