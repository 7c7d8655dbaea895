"""Tropical products of ``dask.array`` inputs: problems larger than one array or one GPU.

Dask already schedules numpy and cupy chunks on threads, processes, or a
cluster, so this module only describes the product as a graph of chunk tasks
and leaves the running to Dask.  Output block ``(i, j)`` is the ⊕ over the K
blocks ``k`` of the chunk products ``A[i, k] ⊗ B[k, j]``, each computed by
[`tropical_gemm.matmul`][tropical_gemm.matmul] (so numpy chunks run on the CPU
engine and cupy chunks on the GPU of the worker holding them), then combined
pairwise as a tree.  The argmax of a chunk product is offset by the start of
its K block, and the combine step lets the earlier K range win ties, so the
results, argmax included, are bit-identical to one ``tropical_gemm.matmul``
call on the whole arrays.

For several GPUs, dask-cuda's ``LocalCUDACluster`` (or ``dask cuda worker``
on each host of a larger cluster) gives one worker process per GPU, with
that GPU as its current device: each chunk product runs where its worker
holds the chunks.  In one process, chunks may also sit on different GPUs: a
task whose cupy operands live on two devices copies the later one to the
earlier one's device and computes there.

``import tropical_gemm.dask`` needs Dask: ``pip install 'tropical-gemm-jit[dask]'``;
the cluster of GPUs needs dask-cuda too: ``pip install 'tropical-gemm-jit[dask-cuda]'``.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import sys
from types import ModuleType
from typing import Any

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from . import api
from .dtypes import argmax_dtype, common_dtype
from .engines import array_kind
from .semirings import Semiring, get_semiring
from .shapes import product_shape, promote_vectors
from .dask_einsum import einsum

__all__ = ["einsum", "matmul"]

Key = tuple


def matmul(a: Any, b: Any, semiring: "str | Semiring" = "max_plus", *, argmax: bool = False):
    """Tropical matrix product of two dask arrays, lazily, as a Dask graph.

    The rules are those of [`tropical_gemm.matmul`][tropical_gemm.matmul]:
    shapes ``(..., M, K) @ (..., K, N)`` with broadcast batch dimensions
    (1-D operands as in ``numpy.matmul``), the same errors, and with ``argmax=True`` a pair ``(C, argmax)`` where argmax
    is the smallest global ``k`` that wins, ``-1`` where ``C`` is the
    semiring's zero.  Chunks may be numpy or cupy arrays (not a mix); anything
    else is wrapped by ``dask.array.asarray``.  ``b`` is rechunked along K
    (and the batch dimensions) to match ``a``; the chunks of M and N carry
    over to the result.  Nothing runs until the result is computed, with any
    Dask scheduler.

    Examples:
        >>> import numpy as np, dask.array as da, tropical_gemm.dask as tgd
        >>> a = da.from_array(np.array([[0., 1., 5., 5.]]), chunks=(1, 2))   # two K blocks
        >>> b = da.from_array(np.array([[2.], [0.], [0.], [0.]]), chunks=(2, 1))
        >>> c, k = tgd.matmul(a, b, "max_plus", argmax=True)
        >>> c.compute(), k.compute()   # 5 + 0 wins at k = 2 and k = 3: the smallest k is kept
        (array([[5.]]), array([[2]], dtype=int32))
    """
    a, b, vectors = promote_vectors(da.asarray(a), da.asarray(b))
    sr = get_semiring(semiring)
    dtype = common_dtype(a.dtype, b.dtype)
    _check_known_chunks(a, b)
    shape = product_shape(a.shape, b.shape)
    if array_kind(a._meta) != array_kind(b._meta):
        raise TypeError(
            f"operands hold chunks of different kinds ({type(a._meta).__name__} and "
            f"{type(b._meta).__name__}); move one to the other's device first"
        )
    a, b = _aligned(a, b, shape.batch)
    result = _product(a, b, sr, dtype, argmax_dtype(shape.k) if argmax else None)
    return tuple(map(vectors.squeeze, result)) if argmax else vectors.squeeze(result)


def _check_known_chunks(a: da.Array, b: da.Array) -> None:
    """Blocks are paired by position, which needs every chunk size (lost e.g. by boolean indexing)."""
    for label, x in (("a", a), ("b", b)):
        if any(np.isnan(size) for sizes in x.chunks for size in sizes):
            raise ValueError(f"{label} has unknown chunk sizes; call {label}.compute_chunk_sizes() first")


def _aligned(a: da.Array, b: da.Array, batch: tuple[int, ...]) -> tuple[da.Array, da.Array]:
    """Both operands broadcast to the full batch, with the same batch and K chunks.

    Each batch dimension keeps the chunks of an operand that really has it (a
    first), so a broadcast size-1 dimension does not force one big block.
    """
    batch_chunks = tuple(
        _batch_dim_chunks(a, b, len(batch) - d, size) for d, size in enumerate(batch)
    )
    return (_broadcast(a, (*batch_chunks, *a.chunks[-2:])),
            _broadcast(b, (*batch_chunks, a.chunks[-1], b.chunks[-1])))


def _batch_dim_chunks(a: da.Array, b: da.Array, from_end: int, size: int) -> tuple[int, ...]:
    """The chunks of the batch dimension ``from_end`` places before the matrix dimensions."""
    for x in (a, b):
        axis = x.ndim - 2 - from_end
        if axis >= 0 and x.shape[axis] == size:
            return x.chunks[axis]
    return (size,)


def _broadcast(x: da.Array, chunks: tuple[tuple[int, ...], ...]) -> da.Array:
    """``x`` rechunked to ``chunks`` where it has the full size, then broadcast to them."""
    shape = tuple(sum(c) for c in chunks)
    offset = len(shape) - x.ndim
    x = x.rechunk({axis: chunks[axis + offset] for axis in range(x.ndim) if x.shape[axis] == shape[axis + offset]})
    return x if x.shape == shape else da.broadcast_to(x, shape, chunks=chunks)


def _product(a: da.Array, b: da.Array, sr: Semiring, dtype: np.dtype, idx_dtype: np.dtype | None):
    """The graph: one task per chunk product, then a pairwise ⊕ tree over the K blocks."""
    token = tokenize(a, b, sr, idx_dtype)
    name = f"tropical-matmul-{token}"
    k_starts = list(itertools.accumulate(a.chunks[-1][:-1], initial=0))
    batch_blocks = itertools.product(*(range(len(c)) for c in a.chunks[:-2]))
    dsk: dict[Key, Any] = {}
    for bi in batch_blocks:
        for i in range(len(a.chunks[-2])):
            for j in range(len(b.chunks[-1])):
                leaves = []
                for kb, start in enumerate(k_starts):
                    key = (f"{name}-partial", *bi, i, kb, j)
                    dsk[key] = (_chunk_product, (a.name, *bi, i, kb), (b.name, *bi, kb, j), sr, start, idx_dtype)
                    leaves.append(key)
                _tree(dsk, leaves, (name, *bi, i, j), sr.add, idx_dtype is not None)
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[a, b])
    chunks = (*a.chunks[:-1], b.chunks[-1])
    values_meta = meta_from_array(a._meta, ndim=len(chunks), dtype=dtype)
    if idx_dtype is None:
        return da.Array(graph, name, chunks, meta=values_meta)
    return (_field(graph, name, 0, chunks, values_meta),
            _field(graph, name, 1, chunks, meta_from_array(a._meta, ndim=len(chunks), dtype=idx_dtype)))


def _tree(dsk: dict[Key, Any], keys: list[Key], root: Key, add: str, with_argmax: bool) -> None:
    """Combine ``keys`` (in K order) pairwise, level by level, into the task ``root``.

    Neighbours are combined, never reordered, so each combine sees an earlier
    and a later K range: what the tie rule needs.  The depth is log2 of the
    number of K blocks.
    """
    combine = _combine_with_argmax if with_argmax else _combine
    level = 0
    while len(keys) > 1:
        pairs = [keys[n:n + 2] for n in range(0, len(keys), 2)]
        last = len(pairs) == 1
        keys = []
        for p, pair in enumerate(pairs):
            if len(pair) == 1:
                keys.append(pair[0])
                continue
            key = root if last else (f"{root[0]}-combine-{level}", *root[1:-1], p, root[-1])
            dsk[key] = (combine, pair[0], pair[1], add)
            keys.append(key)
        level += 1
    if keys[0] != root:  # a single K block: its product is the result
        dsk[root] = dsk.pop(keys[0])


def _field(graph: HighLevelGraph, name: str, index: int, chunks: tuple, meta: Any) -> da.Array:
    """Element ``index`` of every ``(C, argmax)`` block of ``name``, as a dask array."""
    field_name = f"{name}-{('values', 'argmax')[index]}"
    dsk = {(field_name, *key[1:]): (operator.getitem, key, index)
           for key in graph.layers[name] if key[0] == name}
    layers = {**graph.layers, field_name: dsk}
    dependencies = {**graph.dependencies, field_name: {name}}
    return da.Array(HighLevelGraph(layers, dependencies), field_name, chunks, meta=meta)


def _chunk_product(a: Any, b: Any, sr: Semiring, k_start: int, idx_dtype: np.dtype | None):
    """One chunk product on ``a``'s device; its argmax moved from the block's own k to the global k."""
    b = _moved_to_device_of(a, b)
    with _current_device_for(a):
        if idx_dtype is None:
            return api.matmul(a, b, sr)
        c, idx = api.matmul(a, b, sr, argmax=True)
        if _cupy_array(idx):  # a registry kernel: CuPy's where/astype would compile kernels of CuPy's own
            if idx_dtype != np.int32:
                raise ValueError(f"argmax on the GPU supports K < 2**31, got a product of K >= 2**31 ({idx_dtype})")
            if k_start:
                _cuda_aux().offset_argmax(idx, k_start)
            return c, idx
        idx = idx.astype(idx_dtype, copy=False)
        if k_start:
            idx = np.where(idx >= 0, idx + idx_dtype.type(k_start), idx)
        return c, idx


def _combine(earlier: Any, later: Any, add: str) -> Any:
    """⊕ of two partial results; neither holds NaN (the engines never return it), so max/min is exact."""
    later = _moved_to_device_of(earlier, later)
    if _cupy_array(earlier):
        with _current_device_for(earlier):
            return _cuda_aux().merge(earlier, None, later, None, _ADD_SEMIRING[add])[0]
    return np.maximum(earlier, later) if add == "max" else np.minimum(earlier, later)


def _combine_with_argmax(earlier: tuple, later: tuple, add: str) -> tuple:
    """⊕ of two ``(C, argmax)`` partials, the earlier K range winning ties.

    Where both ``C`` are the zero the earlier argmax is already ``-1``;
    where only one is, the other wins: so ``-1`` survives exactly where the
    whole product is the zero, as the single-array rule says.  Partial zeros
    are always ``+0.0``, so equal values are equal bits.
    """
    (c1, i1), (c2, i2) = earlier, later
    if _cupy_array(c1):
        c2, i2 = _moved_to_device_of(c1, c2), _moved_to_device_of(c1, i2)
        with _current_device_for(c1):
            return _cuda_aux().merge(c1, i1, c2, i2, _ADD_SEMIRING[add])
    c = _combine(c1, c2, add)
    return c, np.where(c1 == c, i1, i2)


#: A semiring whose ⊕ is ``add``, for the merge kernels: a merge uses ⊕ only.
_ADD_SEMIRING = {"max": "max_plus", "min": "min_plus"}


def _cuda_aux() -> ModuleType:
    """The CUDA engine's small kernels; a cupy chunk means cupy and the engine can be imported."""
    from .engines import cuda_aux

    return cuda_aux


def _cupy_array(x: Any) -> bool:
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(x, cupy.ndarray)


def _current_device_for(x: Any) -> contextlib.AbstractContextManager:
    """``x``'s GPU as cupy's current device, for a cupy chunk: where its results are allocated and run.

    A thread of Dask's threaded scheduler has device 0 current whatever its
    chunks hold, and new cupy arrays go to the current device.
    """
    return x.device if _cupy_array(x) else contextlib.nullcontext()


def _moved_to_device_of(target: Any, x: Any) -> Any:
    """``x`` itself, or a copy on ``target``'s GPU where both are cupy arrays on different GPUs.

    Chunks a user placed on several GPUs of one process meet in one task, and
    the engine takes operands on one device only.  The copy waits for ``x``'s
    device first and for the copy itself after: it runs on ``target``'s
    stream, which orders neither the work still writing ``x`` on its own
    device nor the reuse of the staging buffer there.
    """
    if not (_cupy_array(target) and _cupy_array(x)) or x.device.id == target.device.id:
        return x
    import cupy

    with x.device:
        x = _cuda_aux().contiguous(x)  # CuPy copies between devices only contiguous arrays
        x.device.synchronize()
    with target.device:
        moved = cupy.asarray(x)
        cupy.cuda.get_current_stream().synchronize()
    return moved
