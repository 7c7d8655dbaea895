"""Kernel specs: the name of exactly one CUDA kernel the library can build.

A spec is the unit of laziness: the registry compiles, caches and loads one
spec at a time.  Everything that changes the generated code is a field here
(or is derived from the fields by the source assembly), so two equal specs
always mean the same kernel and a spec's name is stable across releases.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import product

from ..dtypes import ENGINE_DTYPES as SUPPORTED_DTYPES  # the dtypes kernels compute in
from ..dtypes import FLOAT_DTYPES
from ..semirings import (COUNTING_VALUE_DTYPES, counting_semirings, find_counting_semiring, get_counting_semiring,
                         get_semiring, semirings)

OPS: tuple[str, ...] = ("forward", "forward_argmax", "argmax_resolve", "argmax_resolve_staged", "backward",
                         "backward_ordered_a", "backward_ordered_b", "combine", "combine_resolve", "merge",
                         "stream_fixup", "fill", "gather", "gather_index", "transpose", "argmax_offset", "reduce",
                         "walk", "widen", "narrow", "count_forward", "pack_bits")
"""Forward products, plain and with the argmax; the second phase of the
square-tile argmax (which k of the recorded slice won; ``argmax_resolve_staged``
where K is short enough to copy a tile of outputs' rows and columns into
shared memory first); the gradient
scatter into both operands with atomics (the default: one launch); the
ordered scatters, one per operand, of the deterministic mode; and the small
kernels around them, so that no product path makes CuPy compile a kernel of
its own: ⊕ of K slices with their argmax (``combine``; ``combine_resolve``
also resolves the square tiles' argmax, for the whole product), of two partial
products (``merge``, for Dask), of the partial tiles of a stream-K
product (``stream_fixup``), the K = 0 result (``fill``), strided copies
into contiguous buffers (``gather``; ``gather_index`` to int32; ``transpose``,
a matrix's transpose through shared-memory tiles, for the argmax
resolves) and a chunk's
argmax moved to the product's k (``argmax_offset``); and the ⊕ of each row
of a strided matrix with its argmax (``reduce``, einsum's single-operand steps); einsum's
configuration walk over every step's argmax, one thread per output element (``walk``, whose dtype
is the result's, read where the zero marks an element dead); and the casts
of half-precision storage (``widen`` a float16 array of any strides to
float32, ``narrow`` float32 to float16 rounding to nearest even), which take
no semiring; the product of the counting semirings (``count_forward``:
values and their int64 counts, batched, any strides), which takes only
those; and the boolean semiring's packing of truth values into 32-bit
words along k (``pack_bits``), which its forward kernels read (its einsum
also takes ``reduce``, ``gather`` and ``walk`` of dtype bool).

Examples:
    >>> from tropical_gemm.jit import OPS
    >>> "forward" in OPS and "backward" in OPS
    True
"""
FORWARD_OPS: tuple[str, ...] = ("forward", "forward_argmax")
ORDERED_BACKWARD_OPS: tuple[str, ...] = ("backward_ordered_a", "backward_ordered_b")
BACKWARD_OPS: tuple[str, ...] = ("backward", *ORDERED_BACKWARD_OPS)
#: Ops whose kernel does not depend on the semiring: their specs carry max_plus (those of dtype bool, and_or,
#: the one semiring of truth values) and their names omit it.
SEMIRING_FREE_OPS: tuple[str, ...] = ("gather", "gather_index", "transpose", "argmax_offset", "walk")
#: Ops defined for some dtypes only (the rest take every supported dtype, backward ops the float ones).
_OP_DTYPES: dict[str, tuple[str, ...]] = {"gather_index": ("int32", "int64"), "argmax_offset": ("int32",)}
CAST_OPS: tuple[str, ...] = ("widen", "narrow")
#: The storage dtypes the casts convert to and from float32 (cupy has no bfloat16).
CAST_DTYPES: tuple[str, ...] = ("float16",)
#: Ops of the counting semirings (``semirings.COUNTING_CATALOGUE``), for their value dtypes only.
COUNT_OPS: tuple[str, ...] = ("count_forward",)

#: How an operand is laid out in memory.  "row": its last axis is the
#: contiguous one (C order); "col": its second-to-last axis is (F order, or a
#: transposed view).  Forward kernels read either without a copy.
LAYOUTS: tuple[str, ...] = ("row", "col")

#: Tile families: "square" is the tuned kernel for products that fill the GPU
#: (pipelined in dynamic shared memory where ``jit.source.pipelined`` says
#: so, register-staged elsewhere); "stream" is the pipelined kernel with
#: stream-K, for products whose tiles would leave the GPU's last wave part
#: empty: their slices are shared out evenly over the SMs; "small" is the register-staged
#: kernel with a 32×32 tile, for products that cannot (it also compiles about
#: three times faster); "skinny"
#: is for products where M or N is below a tile, or K is tiny, and "vector"
#: the same kernel for M or N of 1 (matrix-vector products); "thin" is for
#: a short K and a short M or N (all of B in shared memory); "baseline" is
#: one thread per output, which compiles in a fraction of the others' time and
#: serves first calls while their kernel compiles in the background
#: (tiered compilation, ``jit.tiering``).  Baseline kernels take any layout,
#: so their specs are all "row", "row".
TILES: tuple[str, ...] = ("square", "stream", "small", "skinny", "vector", "thin", "baseline")
TUNED_TILES: tuple[str, ...] = ("square", "stream", "small", "skinny", "vector", "thin")

#: The boolean semiring's (``and_or``) kernels, and their one dtype: truth values, one byte each.  Its
#: forward kernels read bit-packed operands, so they have one layout (named "rr").  Tiles: "square", the
#: integer pipe's AND/OR on words (every GPU; the argmax's only one), and "tensor", tensor cores on bits
#: (``mma .and.popc``, sm_80 and later), the plain product's kernel where the GPU has them.  Einsum's
#: ``reduce`` (OR of a row, its first true k), ``gather`` (a strided copy that writes each byte as 0 or 1,
#: so it also reads uint8 as truth values) and ``walk`` serve its steps and configuration on the GPU.
BOOLEAN_OPS: tuple[str, ...] = ("forward", "forward_argmax", "pack_bits", "reduce", "gather", "walk")
BOOLEAN_DTYPE = "bool"
BOOLEAN_TILES: dict[str, tuple[str, ...]] = {"forward": ("square", "tensor"), "forward_argmax": ("square",)}

_DTYPE_TAGS = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "float16": "f16", "bool": "b8"}


@dataclass(frozen=True)
class KernelSpec:
    """One kernel: an operation on one semiring and dtype, in one variant.

    ``a_layout``/``b_layout``/``tile`` apply to forward ops.  Construct
    through [`make_spec`][tropical_gemm.jit.make_spec] or the
    [`catalogue`][tropical_gemm.jit.catalogue], which validate.

    Examples:
        >>> from tropical_gemm.jit import make_spec
        >>> spec = make_spec("forward", "MaxPlus", "float32", b_layout="col")
        >>> spec.name
        'tg_forward_max_plus_f32_rc_square'
        >>> spec.as_dict()["semiring"], spec.as_dict()["b_layout"]
        ('max_plus', 'col')
    """

    op: str
    semiring: str
    dtype: str
    a_layout: str = "row"
    b_layout: str = "row"
    tile: str = "square"

    @property
    def name(self) -> str:
        """A readable C identifier, also the kernel's ``extern "C"`` entry point."""
        parts = ["tg", self.op, _DTYPE_TAGS[self.dtype]]
        if self.semiring and self.op not in SEMIRING_FREE_OPS:
            parts.insert(2, self.semiring)
        if self.op in FORWARD_OPS:
            parts += [self.a_layout[0] + self.b_layout[0], self.tile]
        return "_".join(parts)

    def as_dict(self) -> dict[str, object]:
        return {
            "op": self.op, "semiring": self.semiring, "dtype": self.dtype, "a_layout": self.a_layout,
            "b_layout": self.b_layout, "tile": self.tile,
        }


@lru_cache(maxsize=4096)
def make_spec(
    op: str,
    semiring: str,
    dtype: str,
    *,
    a_layout: str = "row",
    b_layout: str = "row",
    tile: str = "square",
) -> KernelSpec:
    """A validated spec with canonical names; unused variant fields are normalised.

    Cached: the CUDA engine asks for a spec on every call.

    Raises ``ValueError`` naming the valid values for any field that is off.

    Examples:
        >>> from tropical_gemm.jit import make_spec
        >>> make_spec("backward", "min-plus", "float64", tile="skinny").name   # tile is a forward field
        'tg_backward_min_plus_f64'
        >>> make_spec("forward", "max_plus", "float16")
        Traceback (most recent call last):
        ...
        ValueError: unknown dtype 'float16'; valid values are float32, float64, int32, int64
    """
    _check("op", op, OPS)
    if op in CAST_OPS:  # semiring-free: the semiring argument is ignored
        _check("dtype", dtype, CAST_DTYPES)
        return KernelSpec(op, "", dtype)
    if op in COUNT_OPS:  # values of one dtype, counts int64, any strides: no layout or tile
        _check("dtype", dtype, COUNTING_VALUE_DTYPES)
        return KernelSpec(op, get_counting_semiring(semiring).name, dtype)
    if op == "pack_bits" or get_semiring(semiring).boolean:
        return _boolean_spec(op, semiring, dtype, tile)
    if op in SEMIRING_FREE_OPS and dtype == BOOLEAN_DTYPE:  # the semiring is ignored: truth values' are and_or's
        return _boolean_spec(op, "and_or", dtype, tile)
    _check("dtype", dtype, SUPPORTED_DTYPES)
    _check("a_layout", a_layout, LAYOUTS)
    _check("b_layout", b_layout, LAYOUTS)
    _check("tile", tile, TILES)
    canonical = get_semiring(semiring).name
    if op in BACKWARD_OPS and dtype not in FLOAT_DTYPES:
        raise ValueError(f"backward kernels exist for float dtypes only ({', '.join(FLOAT_DTYPES)}), got {dtype}")
    if dtype not in _OP_DTYPES.get(op, SUPPORTED_DTYPES):
        raise ValueError(f"{op} kernels exist for {', '.join(_OP_DTYPES[op])} only, got {dtype}")
    if op in SEMIRING_FREE_OPS:
        return KernelSpec(op, "max_plus", dtype)
    if op not in FORWARD_OPS:
        return KernelSpec(op, canonical, dtype)
    if tile == "baseline":
        return KernelSpec(op, canonical, dtype, "row", "row", tile)
    return KernelSpec(op, canonical, dtype, a_layout, b_layout, tile)


def _boolean_spec(op: str, semiring: str, dtype: str, tile: str) -> KernelSpec:
    """A kernel of the boolean semiring: its forward ops on packed words (``BOOLEAN_TILES``), and the packing."""
    sr = get_semiring(semiring)
    if not sr.boolean:
        raise ValueError(f"{op} kernels exist for the boolean semiring (and_or) only, got {sr.name}")
    if op not in BOOLEAN_OPS:
        raise ValueError(f"the and_or semiring has {', '.join(BOOLEAN_OPS)} kernels only, got {op}")
    _check("dtype", dtype, (BOOLEAN_DTYPE,))
    if op not in BOOLEAN_TILES:
        return KernelSpec(op, sr.name, dtype)
    _check("tile", tile, BOOLEAN_TILES[op])
    return KernelSpec(op, sr.name, dtype, tile=tile)


def _check(field: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"unknown {field} {value!r}; valid values are {', '.join(allowed)}")


def catalogue(
    *,
    semirings_: "tuple[str, ...] | list[str] | None" = None,
    dtypes: "tuple[str, ...] | list[str] | None" = None,
    ops: "tuple[str, ...] | list[str] | None" = None,
) -> list[KernelSpec]:
    """Every spec the library can build, optionally narrowed by semiring, dtype and op.

    Examples:
        >>> from tropical_gemm.jit import catalogue
        >>> specs = catalogue(semirings_=["max_plus"], dtypes=["float32"], ops=["forward"])
        >>> len(specs)                # 2 x 2 operand layouts x 6 tuned tile families, and one baseline
        25
        >>> specs[0].name
        'tg_forward_max_plus_f32_rr_square'
    """
    chosen_counting = ([s for s in semirings_ if find_counting_semiring(s) is not None] if semirings_
                       else list(counting_semirings()))
    chosen_semirings = ([get_semiring(s).name for s in semirings_ if s not in chosen_counting] if semirings_
                        else list(semirings()))
    chosen_dtypes = list(dtypes) if dtypes else list(SUPPORTED_DTYPES + CAST_DTYPES + (BOOLEAN_DTYPE,))
    chosen_ops = list(ops) if ops else list(OPS)
    for d in chosen_dtypes:
        _check("dtype", d, SUPPORTED_DTYPES + CAST_DTYPES + (BOOLEAN_DTYPE,))
    for o in chosen_ops:
        _check("op", o, OPS)
    specs: list[KernelSpec] = [make_spec(op, "", dt) for op in chosen_ops if op in CAST_OPS
                               for dt in chosen_dtypes if dt in CAST_DTYPES]
    specs += [make_spec(op, sr, dt) for op in chosen_ops if op in COUNT_OPS for sr in chosen_counting
              for dt in chosen_dtypes if dt in COUNTING_VALUE_DTYPES]
    for op, sr, dt in product(chosen_ops, chosen_semirings, chosen_dtypes):
        if op in CAST_OPS or op in COUNT_OPS or dt in CAST_DTYPES:
            continue
        if get_semiring(sr).boolean or dt == BOOLEAN_DTYPE or op == "pack_bits":  # only with each other
            if get_semiring(sr).boolean and dt == BOOLEAN_DTYPE and op in BOOLEAN_OPS:
                specs += [make_spec(op, sr, dt, tile=t) for t in BOOLEAN_TILES.get(op, ("square",))]
            continue
        if op in FORWARD_OPS:
            specs += [make_spec(op, sr, dt, a_layout=la, b_layout=lb, tile=t)
                      for la, lb, t in product(LAYOUTS, LAYOUTS, TUNED_TILES)]
            specs.append(make_spec(op, sr, dt, tile="baseline"))
        elif op in BACKWARD_OPS and dt not in FLOAT_DTYPES or dt not in _OP_DTYPES.get(op, SUPPORTED_DTYPES):
            continue
        else:
            specs.append(make_spec(op, sr, dt))
    return list(dict.fromkeys(specs))  # semiring-free ops come once
