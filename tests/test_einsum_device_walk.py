"""einsum's configuration walk on the GPU (``einsum.device_walk``, the registry's ``walk`` kernel) against the host
walk (``backtrack.walk``), the reference, bit for bit.

On the CPU the kernel's table is run by ``emulate``, a line-by-line Python
reading of ``cuda_src/walk.cu`` over numpy arrays standing in for device
memory, so the table's layout and the walk's dead-element rule are checked
without a GPU; the GPU tests compare the kernel itself.
"""

from __future__ import annotations

import numpy as np
import pytest

import tropical_gemm as tg
from tropical_gemm.einsum import _parse, backtrack, einsum_plan
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
]


def operands(rng: np.random.Generator, shapes: list, dtype: str, semiring: str) -> list[np.ndarray]:
    """Small integers (ties likely), with a few of the semiring's zero so that some outputs are dead."""
    low = 0 if semiring == "max_mul" else -3
    ops = [rng.integers(low, 4, size=s).astype(dtype) for s in shapes]
    zero = get_semiring(semiring).zero(np.dtype(dtype))
    for x in ops:
        if x.size:
            x.reshape(-1)[rng.integers(0, x.size, size=max(1, x.size // 6))] = zero
    return ops


def host_walk(subscripts: str, ops: list, semiring: str, optimize) -> tuple:
    """The plan, the parse, the CPU result and argmaxes, and the host walk's configuration."""
    plan = einsum_plan(subscripts, *ops, optimize=optimize)
    parsed, _ = _parse(subscripts, tuple(ops))
    sr = get_semiring(semiring)
    result, argmaxes = execute(plan, parsed, ops, array_ops("cpu"), sr, True)
    return plan, parsed, result, argmaxes, backtrack.walk(plan, parsed, argmaxes, lambda: result == sr.zero(
        result.dtype))


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
                flat += (int(memory[int(addresses[source])][e]) if source >= 0 else coordinate[-1 - source]) * stride
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
    addresses = {t: (1000 + t, argmaxes[t].dtype == np.int64) for t in memory if t < 1000} | {
        s.index: (1000 + s.index, argmaxes[s.index].dtype == np.int64) for s in walk.steps}
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
        walk = plan_walk(plan, _parse(subscripts, tuple(ops))[0])
        assert walk.check_zero is check_zero and walk.names == ("j",) and walk.chosen == (True,)
        assert not walk.all_dead and [w for s in walk.steps for w in s.writes] == [(0, 4)]
    empty = [np.ones((3, 0)), np.ones((0, 4))]
    assert plan_walk(einsum_plan("ij,jk->ik", *empty), _parse("ij,jk->ik", tuple(empty))[0]).all_dead

