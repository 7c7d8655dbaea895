"""The boolean semiring (``and_or``) on the GPU: each operand packed 32 ks to a word, then one register-tiled product.

``pack_bits`` reads an operand with any strides (bool or uint8 bytes,
nonzero is true) into C-contiguous words along k: A's rows, B's columns.
The plain product runs on tensor cores where the GPU has the instruction
for bits (sm_80 and later: ``cuda_src/forward_bits_mma.cu``, ``mma .and.popc``,
32768 multiply-adds an instruction, which needs each line's words padded to
a multiple of 8); elsewhere, and for the argmax (the first true k, which a
count does not give), the kernel of ``cuda_src/forward_bits.cu`` ANDs and ORs
words, one instruction for 32 multiply-adds.  C is written as bool, with no
float copy of anything.  All are catalogue kernels of the registry, compiled
on first use and cached like the others; the packed words live in CuPy's
memory pool for the duration of the call.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...jit import KernelSpec, make_spec, tiers
from ...jit.driver import compute_capability
from ...jit.source import ELEMENTWISE_THREADS, tile_shape
from .. import cupy_module
from .batching import (KERNEL_BATCH_DIMS, Problem, batch_strides, element_strides, fold_batch, fold_dims,
                       split_batches)
from .launch import GRID_LIMIT, elementwise_grid

#: ks per packed word on the GPU.
WORD_BITS = 32
#: Words of one tensor-core step (mma m16n8k256 on bits): the tensor kernel's lines are padded to a multiple.
TENSOR_STEP_WORDS = 8
#: The first compute capability with ``mma .b1 .and.popc`` (and cp.async, ldmatrix).
TENSOR_CAPABILITY = 80


def forward(a: Any, b: Any, out: Any, argmax_out: Any) -> None:
    """Write ``and_or``'s ``a ⊗ b`` (batched, broadcast) into ``out`` (bool), the first true k into ``argmax_out``.

    ``out`` and ``argmax_out`` are C-contiguous with the broadcast shape; K = 0 gives false and -1 everywhere.
    """
    k = a.shape[-1]
    if argmax_out is not None and k >= 2**31:
        raise ValueError(f"argmax on the GPU supports K < 2**31, got K={k}")
    cupy = cupy_module()
    device = out.device.id
    tensor = argmax_out is None and k < 2**31 and compute_capability(device) >= TENSOR_CAPABILITY  # counts are int32
    tile = "tensor" if tensor else "square"
    words = -(-k // WORD_BITS)
    if tensor:
        words = -(-words // TENSOR_STEP_WORDS) * TENSOR_STEP_WORDS  # pack_bits writes the pad words as 0
    a_words = cupy.empty((*a.shape[:-1], words), dtype=np.uint32)
    b_words = cupy.empty((*b.shape[:-2], b.shape[-1], words), dtype=np.uint32)
    pack_spec = make_spec("pack_bits", "and_or", "bool")
    _pack(a, a_words, -1, pack_spec, device)
    _pack(b, b_words, -2, pack_spec, device)
    spec = make_spec("forward_argmax" if argmax_out is not None else "forward", "and_or", "bool", tile=tile)
    arrays = [a_words, b_words, out] + ([] if argmax_out is None else [argmax_out])
    for (sa, sb, sc, *si), sub_batch in split_batches(out.shape[:-2], arrays):
        _product(spec, sa, sb, sc, si[0] if si else None, sub_batch, device)


def _pack(x: Any, words: Any, k_axis: int, spec: KernelSpec, device: int) -> None:
    """``words[..., line, w]`` = the truth values of ``x`` (any strides) along ``k_axis``, 32 to a word."""
    if words.size == 0:
        return
    sizes, steps = fold_dims(x.shape[:-2], element_strides(x)[:-2])
    if len(sizes) > KERNEL_BATCH_DIMS:  # more independent batch dims than the kernel indexes: one at a time
        for i in range(x.shape[0]):
            _pack(x[i], words[i], k_axis, spec, device)
        return
    strides = element_strides(x)
    s_line, s_k = (strides[-2], strides[-1]) if k_axis == -1 else (strides[-1], strides[-2])
    lines, k, w = words.shape[-2], x.shape[k_axis], words.shape[-1]
    pad = KERNEL_BATCH_DIMS - len(sizes)
    dims, batch_steps = (1,) * pad + sizes, (0,) * pad + steps
    batches = math.prod(sizes)
    aligned = s_k == 1 and all(step % 16 == 0 for step in (x.data.ptr, s_line, *batch_steps))
    args = (x, words, *_i64(lines, k, w, s_line, s_k, batches, dims[1], dims[2], *batch_steps,
                            int(abs(s_line) < abs(s_k)), int(aligned)))
    tiers().get_function(spec, device)((elementwise_grid(batches * lines * w),), (ELEMENTWISE_THREADS,), args)


def _product(spec: KernelSpec, a_words: Any, b_words: Any, c: Any, idx: Any, batch: tuple[int, ...],
             device: int) -> None:
    """One launch over a batch the kernel indexes: packed operands (batch strides 0 where they broadcast)."""
    m, n, w = a_words.shape[-2], b_words.shape[-2], a_words.shape[-1]
    dims, (sa, sb) = fold_batch(batch, [batch_strides(x.shape, element_strides(x), batch) for x in (a_words, b_words)])
    problem = Problem(m, n, w, dims, (sa, sb))
    shape = tile_shape(spec)
    tiles = -(-m // shape.bm) * -(-n // shape.bn) * problem.batches
    args = (a_words, b_words, c, 0 if idx is None else idx, *_i64(m, n, w, problem.batches, *problem.batch_args()))
    tiers().get_function(spec, device)((max(1, min(tiles, GRID_LIMIT)),), (shape.threads,), args)


def _i64(*values: int) -> tuple:
    return tuple(np.int64(v) for v in values)
