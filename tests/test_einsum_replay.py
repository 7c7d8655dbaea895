"""Replayed einsum: the program of launches on addresses (on the CPU, run by numpy), then the replay on a GPU.

The program (``einsum.program``) is pure: its views, copies and buffer
offsets are checked here by running it with numpy over a byte arena that
starts as garbage, against the array path (``lower.execute``) bit for bit,
values and every step's argmax.  A buffer laid over one still in use, a
wrong stride or a missing copy shows as a wrong value.  The GPU tests run
the replay itself against the array path on cupy arrays.
"""

from __future__ import annotations

import numpy as np
import pytest

import tropical_gemm as tg
from tropical_gemm.einsum import parse_call, optimize_key, program as prog
from tropical_gemm.einsum.lower import array_ops, execute, permuted, reduce_rows_cpu
from tropical_gemm.einsum.plan import make_plan
from tropical_gemm.semirings import get_semiring

from emulated_device import DeviceArray, FakeCupy, Memory, fake_binder
from jit_helpers import RecordingTiers

#: (subscripts, shapes, how to lay out each operand): "c" C-contiguous, "t" transposed, "s" strided (every
#: other element), "r" reversed first axis (a negative stride), "b" broadcast (a zero stride).
CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)], "cc"),
    ("ij,jk->ik", [(16, 16), (16, 16)], "tc"),
    ("ij,jk->ik", [(7, 13), (13, 5)], "ss"),
    ("ij,jk->ki", [(3, 4), (4, 2)], "rt"),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)], "ctc"),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 3)], "tc"),
    ("bij,bjk->bik", [(3, 5, 4), (3, 4, 6)], "bc"),
    ("ij,jk", [(3, 4), (4, 2)], "cs"),
    ("ij->i", [(3, 5)], "t"),
    ("ij->", [(3, 5)], "c"),
    ("iij,jk->ik", [(3, 3, 2), (2, 4)], "cc"),
    ("ij,ij->ij", [(3, 4), (3, 4)], "ct"),
    ("i,j->ij", [(3,), (4,)], "cr"),
    (",ij->ij", [(), (2, 3)], "cc"),
    ("ijk,jl,lk->i", [(2, 3, 4), (3, 2), (2, 4)], "tcc"),
    ("ab,bc,cd,da->", [(2, 3), (3, 2), (2, 3), (3, 2)], "ctct"),
    ("ij,k->ik", [(3, 4), (5,)], "cc"),
    ("ijk,kil->jl", [(6, 5, 7), (7, 6, 4)], "cc"),           # a permuted copy (i and k split in the second)
    ("ijk,jkl->il", [(4, 3, 5), (3, 5, 2)], "tc"),           # two contracted labels, one operand transposed
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (3, 4, 5)], "cc"),  # broadcast ... dims
    ("abcd,dcbe->ae", [(2, 3, 2, 3), (3, 2, 3, 2)], "tt"),
]


def layout_operand(x: np.ndarray, how: str, xp=np):
    """``x``'s values in another memory layout (the same array as far as einsum is concerned), as a view of an
    ``xp`` array (numpy, or cupy: views only, so CuPy compiles nothing)."""
    if how == "t" and x.ndim >= 2:
        return xp.asarray(np.ascontiguousarray(x.T)).T
    if how == "s":
        wide = np.zeros(tuple(2 * n for n in x.shape), x.dtype)
        wide[tuple(slice(None, None, 2) for _ in x.shape)] = x
        return xp.asarray(wide)[tuple(slice(None, None, 2) for _ in x.shape)]
    if how == "r" and x.ndim >= 1:
        return xp.asarray(np.ascontiguousarray(x[::-1]))[::-1]
    if how == "b" and x.ndim >= 1 and x.shape[0] > 1:
        return xp.broadcast_to(xp.asarray(x[:1]), x.shape)
    return xp.asarray(x)


def operands_for(shapes, layouts, dtype, rng, semiring="max_plus", xp=np):
    low = 0 if semiring == "max_mul" else -4
    return [layout_operand(rng.integers(low, 4, size=s).astype(dtype), how, xp) for s, how in zip(shapes, layouts)]


def element_strides(x: np.ndarray) -> tuple[int, ...]:
    return tuple(s // x.itemsize for s in x.strides)


def traced(subscripts, operands, want_argmax, optimize="greedy"):
    parsed, ops = parse_call(subscripts, tuple(operands))
    plan = make_plan(parsed, optimize_key(optimize))
    program = prog.trace(plan, parsed, tuple(x.shape for x in ops), tuple(element_strides(x) for x in ops),
                         ops[0].itemsize, want_argmax)
    return parsed, plan, program


def interpret(program, places, plan, operands, semiring):
    """Run ``program`` with numpy: operands as strided views, buffers in byte blocks that start as garbage."""
    dtype, itemsize = operands[0].dtype, operands[0].itemsize
    rng = np.random.default_rng(0)
    blocks = [rng.integers(0, 256, max(1, n), dtype=np.uint8) for n in (places.arena_bytes, places.final_bytes)]

    def buffer(i, shape, dt=dtype):
        block, offset = places.places[i]
        return np.ndarray(shape, dt, buffer=blocks[block], offset=offset)

    def view(v):
        if v.source[0] == "operand":
            return np.lib.stride_tricks.as_strided(operands[v.source[1]], v.shape, [s * itemsize for s in v.strides])
        block, offset = places.places[v.source[1]]
        return np.ndarray(v.shape, dtype, buffer=blocks[block], offset=offset,
                          strides=[s * itemsize for s in v.strides])

    for op in program.ops:
        if isinstance(op, prog.Copy):
            buffer(op.dst, op.src.shape)[...] = view(op.src)
        elif isinstance(op, prog.Product):
            a, b = view(op.a), view(op.b)
            shape = (a.shape[0], a.shape[1], b.shape[2])
            values, idx = tg.matmul(a, b, semiring, argmax=True)
            buffer(op.out, shape)[...] = values
            if op.argmax is not None:
                buffer(op.argmax, shape, np.int32)[...] = idx
        else:
            values, idx = reduce_rows_cpu(view(op.x), get_semiring(semiring))
            buffer(op.out, values.shape)[...] = values
            buffer(op.argmax, idx.shape, np.int32)[...] = idx
    result = permuted(buffer(program.result, plan.steps[-1].out_shape), plan.final)
    argmaxes = [None if i is None else buffer(i, step.out_shape, np.int32)
                for i, step in zip(program.argmaxes, plan.steps)]
    return result, argmaxes


@pytest.mark.parametrize("subscripts, shapes, layouts", CASES)
@pytest.mark.parametrize("dtype, semiring", [("float32", "max_plus"), ("int64", "min_plus"), ("float64", "max_min"),
                                             ("int32", "max_mul")])
@pytest.mark.parametrize("want_argmax", [False, True])
def test_the_program_run_by_numpy_is_the_array_path_bit_for_bit(subscripts, shapes, layouts, dtype, semiring,
                                                                 want_argmax):
    rng = np.random.default_rng(len(subscripts) + len(shapes))
    operands = operands_for(shapes, layouts, dtype, rng, semiring)
    parsed, plan, program = traced(subscripts, operands, want_argmax)
    if not plan.steps:
        assert program is None
        return
    places = prog.layout(program.buffers, len(plan.steps))
    got, got_idx = interpret(program, places, plan, operands, semiring)
    want, want_idx = execute(plan, parsed, operands, array_ops("cpu"), get_semiring(semiring), want_argmax)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    for g, w in zip(got_idx, want_idx):
        assert (g is None) == (w is None)
        if g is not None:
            np.testing.assert_array_equal(g, w)


def test_a_left_fold_of_101_matrices_reuses_two_buffers_and_needs_no_copy():
    args = []
    rng = np.random.default_rng(1)
    for t in range(101):
        args += [rng.standard_normal((16, 16)).astype(np.float32), [t, t + 1]]
    path = [(0, 1)] + [(0, 100 - t) for t in range(1, 100)]
    parsed, ops = parse_call(args[0], tuple(args[1:] + [[0, 101]]))
    plan = make_plan(parsed, optimize_key(path))
    program = prog.trace(plan, parsed, tuple(x.shape for x in ops), tuple(element_strides(x) for x in ops), 4, False)
    assert all(isinstance(op, prog.Product) for op in program.ops) and len(program.ops) == 100
    places = prog.layout(program.buffers, len(plan.steps))
    assert places.final_bytes == 1024 and places.arena_bytes == 2 * 1024  # ping-pong between two intermediates
    got, _ = interpret(program, places, plan, ops, "max_plus")
    np.testing.assert_array_equal(got, execute(plan, parsed, ops, array_ops("cpu"), get_semiring("max_plus"),
                                               False)[0])


def test_split_groups_are_copied_and_argmaxes_live_to_the_end():
    x, y = np.zeros((6, 5, 7), np.float32), np.zeros((7, 6, 4), np.float32)
    _, plan, program = traced("ijk,kil->jl", [x, y], True)
    assert [type(op).__name__ for op in program.ops] == ["Copy", "Copy", "Product"]  # (j, ik) and (ki, l)
    kept = [program.buffers[i] for i in program.argmaxes if i is not None]
    assert kept and all(b.last >= len(plan.steps) or b.final for b in kept)
    assert program.buffers[program.result].final


def test_layout_never_overlaps_buffers_that_live_at_once():
    rng = np.random.default_rng(3)
    steps = 40
    buffers = []
    for first in sorted(rng.integers(0, steps, 200)):
        last = int(steps if rng.random() < 0.2 else min(steps - 1, first + rng.integers(0, 4)))
        buffers.append(prog.Buffer(int(rng.integers(1, 5000)), int(first), last, bool(rng.random() < 0.02)))
    places = prog.layout(buffers, steps)
    for i, (bi, pi) in enumerate(zip(buffers, places.places)):
        assert pi[1] % prog.ALIGN == 0
        assert pi[1] + bi.nbytes <= (places.final_bytes if bi.final else places.arena_bytes)
        for bj, pj in zip(buffers[i + 1:], places.places[i + 1:]):
            same_block = pi[0] == pj[0]
            at_once = bi.first <= bj.last and bj.first <= bi.last
            if same_block and at_once:
                assert pi[1] + bi.nbytes <= pj[1] or pj[1] + bj.nbytes <= pi[1], (bi, bj, pi, pj)


def test_operand_views_drop_broadcast_axes_and_fold_diagonals():
    assert prog.operand_view(0, (3, 3, 2), (6, 2, 1), (0, 0, 1), ()) == prog.View(("operand", 0), (3, 2), (8, 1))
    assert prog.operand_view(1, (1, 4, 5), (20, 5, 1), (0, 1, 2), (0,)) == prog.View(("operand", 1), (4, 5), (5, 1))


def test_regrouped_strides_follow_the_array_path():
    assert prog.regrouped((2, 3, 4), (12, 4, 1), (6, 4)) == (4, 1)
    assert prog.regrouped((3, 2), (1, 3), (6,)) is None
    assert prog.regrouped((4, 1), (1, 7), (4, 1)) == (1, 7)   # C-contiguous, same shape: its own strides
    assert prog.is_c_contiguous((4, 1, 3), (3, 99, 1)) and not prog.is_c_contiguous((4, 3), (1, 4))


@pytest.mark.parametrize("module", ["tropical_gemm.einsum.program", "tropical_gemm.engines.cuda_aux"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    failures, tried = doctest.testmod(importlib.import_module(module))
    assert tried > 0 and failures == 0


def test_programs_refuse_what_addresses_cannot_serve():
    assert traced("ij->ji", [np.zeros((2, 3))], False)[2] is None  # no steps: a view of the input
    assert traced("ij,jk->ik", [np.zeros((2, 0)), np.zeros((0, 3))], False)[2] is None  # a size 0


# ------------------------------------------------- the replay itself, on an emulated device (no GPU)


@pytest.mark.parametrize("subscripts, shapes, layouts", CASES)
@pytest.mark.parametrize("want_argmax", [False, True])
def test_the_replay_on_an_emulated_device_is_the_array_path(subscripts, shapes, layouts, want_argmax, monkeypatch):
    from tropical_gemm.einsum import replay

    memory = Memory()
    monkeypatch.setattr(replay, "cupy_module", lambda: FakeCupy(memory))
    monkeypatch.setattr(replay, "_bind", fake_binder(memory))
    replay.prepared.cache_clear()
    try:
        host = operands_for(shapes, layouts, "float32", np.random.default_rng(len(subscripts)))
        device = [DeviceArray(memory, x) for x in host]
        parsed, _ = parse_call(subscripts, tuple(host))
        for _ in range(2):  # built, then replayed from the cache
            got = replay.run(parsed, optimize_key("greedy"), device, get_semiring("max_plus"), want_argmax)
            plan = make_plan(parsed, optimize_key("greedy"))
            if not plan.steps:
                assert got is None
                return
            want, want_idx = execute(plan, parsed, host, array_ops("cpu"), get_semiring("max_plus"), want_argmax)
            assert got[0] is plan
            np.testing.assert_array_equal(got[1], want)
            for g, w in zip(got[2], want_idx):
                assert (g is None) == (w is None)
                if g is not None:
                    np.testing.assert_array_equal(g, w)
    finally:
        replay.prepared.cache_clear()


def test_a_cached_replay_runs_the_baseline_until_the_tuned_kernel_is_servable(monkeypatch):
    """The replay's real binding (prepared products, bound ``gather`` and ``reduce``) over recorded kernels: a
    product whose tuned kernel compiles launches the baseline, and the same cached replay swaps the tuned one in."""
    from tropical_gemm.einsum import replay
    from tropical_gemm.engines.cuda import binding, gpu, prepared

    launches: list = []
    tiers = RecordingTiers(launches)
    memory = Memory()
    monkeypatch.setattr(binding, "tiers", lambda: tiers)
    monkeypatch.setattr(binding, "get_function", tiers.get_function)
    monkeypatch.setattr(prepared, "tiers", lambda: tiers)
    monkeypatch.setattr(gpu, "sm_count", lambda device: 132)
    monkeypatch.setattr(gpu, "shared_limit", lambda device: 227 * 1024)
    monkeypatch.setattr(replay, "cupy_module", lambda: FakeCupy(memory))
    caches = (replay.prepared, prepared.prepare_product, binding._bound)
    for cache in caches:
        cache.cache_clear()
    try:
        rng = np.random.default_rng(0)
        x, y = rng.standard_normal((6, 5, 7)).astype(np.float32), rng.standard_normal((7, 6, 4)).astype(np.float32)
        device = [DeviceArray(memory, x), DeviceArray(memory, y)]
        parsed, _ = parse_call("ijk,kil->jl", (x, y))
        for compiling in (True, False):
            tiers.compiling = compiling
            launches.clear()
            got = replay.run(parsed, "auto", device, get_semiring("max_plus"), True)
            assert got is not None and all(entry[-1] == 7 for entry in launches if len(entry) > 1)
            names = [entry[0] for entry in launches]
            assert names == (["gather", "gather", "counted", "baseline"] if compiling
                             else ["gather", "gather", "skinny"]), names
        assert replay.prepared.cache_info().hits == 1
        (x2,) = [DeviceArray(memory, x)]
        launches.clear()
        assert replay.run(parse_call("ijk->j", (x,))[0], "auto", [x2], get_semiring("min_plus"), False) is not None
        (gather, _, _, x_args, _), (reduce, _, _, r_args, _) = launches  # (i, k) is no view of j-major memory: a copy first
        assert (gather, reduce) == ("gather", "reduce") and x_args[0] == x2.data.ptr and r_args[0] == x_args[1]
        assert r_args[3:] == (5, 42, 42, 1)  # rows, k, and the copy's strides
    finally:
        for cache in caches:
            cache.cache_clear()


# ------------------------------------------------------------------------- GPU


def _general(subscripts, ops, semiring, want_argmax):
    """The array path on cupy arrays: ``lower.execute`` with the engine's products."""
    parsed, ops = parse_call(subscripts, tuple(ops))
    plan = make_plan(parsed, optimize_key("auto"))
    return execute(plan, parsed, list(ops), array_ops("cuda"), get_semiring(semiring), want_argmax)


GPU_CASES = CASES + [
    ("ij,jk->ik", [(37, 61), (61, 29)], "tc"),                # ragged
    ("ij,jk->ik", [(64, 4096), (4096, 48)], "ct"),            # K slices: a PreparedSplitK on scratch memory
    ("bij,bjk->bik", [(5, 33, 17), (5, 17, 40)], "sc"),
    ("ijk,jkl->il", [(40, 9, 11), (9, 11, 33)], "cc"),
    ("ij->i", [(7, 3000)], "c"),                               # a long reduction
]


@pytest.mark.gpu
@pytest.mark.parametrize("subscripts, shapes, layouts", GPU_CASES)
@pytest.mark.parametrize("dtype, semiring", [("float32", "max_plus"), ("float64", "min_plus"), ("int32", "max_min"),
                                             ("int64", "max_plus"), ("float32", "max_mul")])
def test_gpu_replay_equals_the_array_path_bit_for_bit(subscripts, shapes, layouts, dtype, semiring):
    import cupy

    from tropical_gemm.einsum import replay

    host = operands_for(shapes, layouts, dtype, np.random.default_rng(len(subscripts) + len(shapes)), semiring)
    ops = operands_for(shapes, layouts, dtype, np.random.default_rng(len(subscripts) + len(shapes)), semiring, cupy)
    assert [x.strides for x in ops] == [x.strides for x in host]
    for want_argmax in (False, True):
        parsed, dev = parse_call(subscripts, tuple(ops))
        replayed = replay.run(parsed, optimize_key("auto"), list(dev), get_semiring(semiring), want_argmax)
        if not make_plan(parsed, optimize_key("auto")).steps:
            assert replayed is None
            continue
        assert replayed is not None
        _, got, got_idx = replayed
        want, want_idx = _general(subscripts, ops, semiring, want_argmax)
        np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(want))
        for g, w in zip(got_idx, want_idx):
            assert (g is None) == (w is None)
            if g is not None:
                np.testing.assert_array_equal(cupy.asnumpy(g), cupy.asnumpy(w))
        got_all = tg.einsum(subscripts, *ops, semiring=semiring, return_configuration=want_argmax)
        want_all = tg.einsum(subscripts, *host, semiring=semiring, return_configuration=want_argmax)
        if want_argmax:
            np.testing.assert_array_equal(cupy.asnumpy(got_all[0]), want_all[0])
            for name, value in want_all[1].items():
                np.testing.assert_array_equal(cupy.asnumpy(got_all[1][name]), value)
        else:
            np.testing.assert_array_equal(cupy.asnumpy(got_all), want_all)


@pytest.mark.gpu
def test_gpu_chain_of_101_and_network_configurations():
    import cupy

    rng = np.random.default_rng(2)
    args = []
    for t in range(101):
        args += [rng.integers(-4, 4, (16, 16)).astype(np.float32), [t, t + 1]]
    path = [(0, 1)] + [(0, 100 - t) for t in range(1, 100)]
    dev = [cupy.asarray(x) if i % 2 == 0 else x for i, x in enumerate(args)]
    for _ in range(2):  # the second call replays the cached signature
        got, config = tg.einsum(*dev, [0, 101], optimize=path, return_configuration=True)
        want, want_config = tg.einsum(*args, [0, 101], optimize=path, return_configuration=True)
        np.testing.assert_array_equal(cupy.asnumpy(got), want)
        for name, value in want_config.items():
            np.testing.assert_array_equal(cupy.asnumpy(config[name]), value)
    score, config = tg.einsum(*dev, [], optimize=path, return_configuration=True)
    want_score, want_config = tg.einsum(*args, [], optimize=path, return_configuration=True)
    assert float(score) == float(want_score)
    assert {k: int(v) for k, v in config.items()} == {k: int(v) for k, v in want_config.items()}


@pytest.mark.gpu
def test_gpu_signatures_addresses_cannot_serve_take_the_array_path():
    import cupy

    from tropical_gemm.einsum import replay

    rng = np.random.default_rng(4)
    half = rng.integers(-4, 4, (5, 6)).astype(np.float16), rng.integers(-4, 4, (6, 3)).astype(np.float16)
    empty = np.zeros((3, 0), np.float32), np.zeros((0, 4), np.float32)
    for a, b in (half, empty):
        da, db = cupy.asarray(a), cupy.asarray(b)
        parsed, _ = parse_call("ij,jk->ik", (da, db))
        assert replay.run(parsed, "auto", [da, db], get_semiring("max_plus"), False) is None
        np.testing.assert_array_equal(cupy.asnumpy(tg.einsum("ij,jk->ik", da, db)), tg.einsum("ij,jk->ik", a, b))
