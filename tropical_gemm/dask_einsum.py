"""Tropical einsum of dask arrays, lazily: one task per output block.

Each output block is one [`tropical_gemm.einsum`][tropical_gemm.einsum.einsum] of
the operands' blocks that it depends on, with every contracted index whole
(``dask.array.blockwise`` with ``concatenate=True``), so each block's value
and tie-break are those of one einsum over the whole arrays.  Work spreads
over the output's blocks; chunk the operands along the output's indices, not
the contracted ones.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
from dask.array.utils import meta_from_array

from .dtypes import canonical_dtype, common_dtype
from .semirings import Semiring, get_semiring


def einsum(subscripts: Any, *operands: Any, semiring: "str | Semiring" = "max_plus", optimize: Any = "auto",
           return_configuration: bool = False) -> da.Array:
    """[`tropical_gemm.einsum`][tropical_gemm.einsum.einsum] of dask arrays (others are wrapped by ``dask.array.asarray``), as a lazy dask array.

    Examples:
        >>> import numpy as np, dask.array as da, tropical_gemm.dask as tgd
        >>> a = da.from_array(np.array([[0., 5.], [1., 1.]]), chunks=1)
        >>> c = tgd.einsum("ij,jk->ik", a, np.array([[0., 0.], [2., 0.]]))
        >>> type(c).__name__, c.compute()
        ('Array', array([[7., 5.],
               [3., 1.]]))
    """
    from .einsum import optimize_key, parse_call

    if return_configuration:
        raise TypeError(
            "return_configuration=True is not supported for dask arrays: the configuration needs every step's "
            "argmax at once; compute the operands first (x.compute()) and call tropical_gemm.einsum on them"
        )
    parsed, arrays = parse_call(subscripts, operands)
    arrays = [da.asarray(x) for x in arrays]
    sr = get_semiring(semiring)
    if sr.boolean:
        raise TypeError("the and_or semiring takes numpy arrays in einsum, not dask arrays; compute() the "
                        "operands first (numpy or cupy arrays), or map tropical_gemm.einsum over their blocks")
    dtype = canonical_dtype(arrays[0].dtype)  # checked here, not when the graph is computed
    for x in arrays[1:]:
        common_dtype(dtype, x.dtype)
    optimize_key(optimize)
    args: list[Any] = []
    for x, labels, drop in zip(arrays, parsed.inputs, parsed.drop):
        if drop:  # broadcast size-1 axes: the operand does not depend on them
            x = x[tuple(0 if axis in drop else slice(None) for axis in range(x.ndim))]
            labels = tuple(lab for axis, lab in enumerate(labels) if axis not in drop)
        args += [x, labels]
    out = parsed.output

    def block(*blocks: Any) -> Any:
        from .einsum import einsum as block_einsum

        interleaved = [item for pair in zip(blocks, args[1::2]) for item in pair]
        return block_einsum(*interleaved, list(out), semiring=sr, optimize=optimize)

    meta = meta_from_array(arrays[0]._meta, ndim=len(out), dtype=dtype)
    return da.blockwise(block, out, *args, concatenate=True, dtype=dtype, meta=meta)
