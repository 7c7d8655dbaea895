"""Source assembly: one spec becomes one small, self-contained CUDA program.

The program is the shared headers, concatenated in a fixed order
(``HEADERS``: limits and elementwise operations, the semiring functors
generated from the catalogue by ``functors.py``, tile loaders, the square,
skinny and backward kernel templates), followed by the fragment for the
spec's operation, rendered with the spec's semiring, dtype, layouts and tile
sizes.  Each fragment defines one ``extern "C"`` entry point named after the
spec, so a cubin loaded from disk is found by that name with no recompile.
The text returned here is what NVRTC compiles and what the cache key hashes:
contents, never file paths, so an edit to any header gives new keys.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from string import Template
from typing import NamedTuple

import numpy as np

from ..semirings import CATALOGUE, COUNT_NEGATIVE, COUNT_OVERFLOW, get_counting_semiring, get_semiring
from .functors import device_type, functor, functors_header, needs_exact_path
from .spec import BOOLEAN_DTYPE, CAST_OPS, COUNT_OPS, FORWARD_OPS, ORDERED_BACKWARD_OPS, KernelSpec

_C_TYPES = {"float32": "float", "float64": "double", "int32": "int", "int64": "long long", "bool": "unsigned char"}
#: The catalogue's functor names (benchmarks/ceilings.py instantiates its probes with them).
_SEMIRING_TYPES = {s.name: device_type(s) for s in CATALOGUE}

#: The program's headers, in order; "semirings.cuh" is generated (``functors.py``), the rest are
#: files of ``cuda_src/`` (``preamble.cuh`` has the map of what each holds).
HEADERS: tuple[str, ...] = ("preamble.cuh", "semirings.cuh", "tiles.cuh", "square.cuh", "staged.cuh",
                            "pipelined.cuh", "streamed.cuh", "skinny.cuh", "thin.cuh", "backward.cuh")
GENERATED_HEADER = "semirings.cuh"


class TileShape(NamedTuple):
    """Block tile (BM×BN×BK), per-thread tile (TM×TN) and residency of a forward kernel.

    ``threads`` is derived: one thread per TM×TN sub-tile of the block tile.
    ``min_blocks`` asks the compiler to fit that many blocks per SM (it caps
    registers accordingly).  ``unroll``: how many k steps of a staged slice
    the square and small kernels unroll; 0 takes the preamble's
    ``TG_UNROLL``.  Fewer unrolled steps mean less code for NVVM and ptxas
    to optimise, so a shorter compile (issue 15's budget of a tuned kernel).
    For the skinny and vector families, BN is the columns per block, TM the
    rows each thread keeps, BK the K chunk staged in shared memory; for the
    thin family, BM is the rows per block (one per thread), and BK × BN the
    largest B it takes.  ``stages``: the pipelined square kernel's cp.async
    stages in dynamic shared memory (``PIPELINED_SHAPES``); 0 elsewhere.
    ``each_k``: the argmax of a product up to this deep compares every
    candidate with its output and keeps the winner's k, a compare and a
    select more per multiply-add, and no resolve follows; deeper ones record
    slices (see ``each_k_depth``).  0: one slice (BK) deep.  ``shared_record``:
    the pipelined square argmax keeps half of that record in shared memory
    past its stages, not in registers (``dynamic_shared_bytes``).
    """

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    min_blocks: int = 1
    unroll: int = 0
    stages: int = 0
    each_k: int = 0
    shared_record: bool = False

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)


_SQUARE_F32 = TileShape(128, 128, 16, 8, 8, min_blocks=2)
# int32 (with the exact path) unrolls 1 k step: its kernels also keep the tame-tile test and the exact
# path, and at 4 steps their compile went over the budget; at 2 ptxas spilled registers of the max_times
# kernels of mixed layouts (issue 32: the exact path must not spill).
_SQUARE_I32 = TileShape(128, 128, 16, 8, 8, min_blocks=2, unroll=1)
_SQUARE_F64 = TileShape(64, 64, 16, 4, 4, min_blocks=2)
_SQUARE_I64 = TileShape(64, 64, 16, 4, 4, min_blocks=2)  # BK=16 beat 8: tune-tiles-8-byte-H100-2026-11-24.json
#: The float argmaxes of a K up to this deep compare every candidate (``TileShape.each_k``): a compare and a
#: select per multiply-add cost less there than the resolve of the slices, whose work grows with the outputs
#: alone (benchmarks/argmax_short_k.py --each-k on an H200).  The integer ones keep the slices: their ⊗ and ⊕
#: are one instruction, which the compare and selects would quadruple.
_FLOAT_EACH_K = 256
# The argmax variant also keeps, per output, the slice number and the value before the slice.  With the plain
# product's 8×8 thread tile that takes an SM's register file for one block, and its compile went over the budget;
# 8×4 outputs a thread compile in about half the time (tune_tiles.py's CANDIDATES time both).
_ARGMAX_4_BYTE = TileShape(128, 64, 8, 8, 4, min_blocks=2)
# int32 (with the exact path): two blocks per SM spilled the lean tile's registers; at one block of
# 16-deep slices it has none, and ran 5% faster (tune-tiles-argmax-H200-2026-11-28.json).
_ARGMAX_I32 = TileShape(128, 64, 16, 8, 4, min_blocks=1)
_ARGMAX_8_BYTE = TileShape(64, 64, 16, 4, 4, min_blocks=2)
# Products too small to fill the GPU with the tiles above: 16 times the
# blocks, and BK=8 keeps the unrolled body, so the compile, short.
_SMALL = TileShape(32, 32, 8, 4, 4, min_blocks=4)
# BK=16 (more resident blocks) measured slower on 2²¹×4×4 and 8×4096×4096.
_SKINNY_4_BYTE = TileShape(8, 256, 32, 8, 1)
_SKINNY_8_BYTE = TileShape(8, 256, 16, 8, 1)  # keeps the staged B slice within 48 KiB
# The skinny kernel with one row per thread, for products with one row.
_VECTOR_4_BYTE = TileShape(1, 256, 32, 1, 1)
_VECTOR_8_BYTE = TileShape(1, 256, 16, 1, 1)
# A row of C per thread (BM rows per block); B, at most BK × BN, in shared memory.
_THIN = TileShape(256, 8, 8, 1, 8)
# One thread per output (bm: outputs per block); only the block size is used.
_BASELINE = TileShape(256, 1, 1, 1, 1)
# The boolean semiring's product on packed words (BK: words, 32 ks each, per staged slice); forward_bits.cu
# loads each thread's TM (TN) words as uint4s, so both are multiples of 4.  The plain product unrolls the
# whole slice; the argmax, a select per output and word, unrolls none of it, for a shorter compile.
_BITS = TileShape(128, 128, 8, 8, 8, min_blocks=2, unroll=8)
_BITS_ARGMAX = TileShape(128, 128, 8, 8, 8, min_blocks=2, unroll=1)
# The tensor-core product (forward_bits_mma.cu): 4 warps of 64×64 outputs (16×8 a thread), BK words (two mma
# k steps of 256) per shared-memory stage, two stages; two blocks per SM.
_BITS_TENSOR = TileShape(128, 128, 16, 16, 8, min_blocks=2)

#: Tile shapes per (family, dtype, op), measured on an H100 by benchmarks/tune_tiles.py.
TILE_SHAPES: dict[tuple[str, str, str], TileShape] = {
    ("square", "float32", "forward"): _SQUARE_F32,
    ("square", "int32", "forward"): _SQUARE_I32,
    ("square", "float64", "forward"): _SQUARE_F64,
    ("square", "int64", "forward"): _SQUARE_I64,
    ("square", "float32", "forward_argmax"): _ARGMAX_4_BYTE._replace(each_k=_FLOAT_EACH_K),
    ("square", "int32", "forward_argmax"): _ARGMAX_I32,
    ("square", "float64", "forward_argmax"): _ARGMAX_8_BYTE._replace(each_k=_FLOAT_EACH_K),
    ("square", "int64", "forward_argmax"): _ARGMAX_8_BYTE,
    **{("small", d, op): _SMALL for d in ("float32", "float64", "int32", "int64") for op in FORWARD_OPS},
    **{("small", d, "forward_argmax"): _SMALL._replace(each_k=_FLOAT_EACH_K) for d in ("float32", "float64")},
    **{("skinny", d, op): _SKINNY_4_BYTE for d in ("float32", "int32") for op in FORWARD_OPS},
    **{("skinny", d, op): _SKINNY_8_BYTE for d in ("float64", "int64") for op in FORWARD_OPS},
    **{("vector", d, op): _VECTOR_4_BYTE for d in ("float32", "int32") for op in FORWARD_OPS},
    **{("vector", d, op): _VECTOR_8_BYTE for d in ("float64", "int64") for op in FORWARD_OPS},
    **{("thin", d, op): _THIN for d in ("float32", "float64", "int32", "int64") for op in FORWARD_OPS},
    **{("baseline", d, op): _BASELINE for d in ("float32", "float64", "int32", "int64") for op in FORWARD_OPS},
    ("square", BOOLEAN_DTYPE, "forward"): _BITS,
    ("square", BOOLEAN_DTYPE, "forward_argmax"): _BITS_ARGMAX,
    ("tensor", BOOLEAN_DTYPE, "forward"): _BITS_TENSOR,
}

#: The pipelined square kernel's shape per (op, dtype, operand layouts: A's then B's first letter), for the
#: square family's products; measured on an H200 by benchmarks/tune_tiles.py (tune-tiles-pipelined-,
#: -products-, -f64-, -exact-argmax-H200-2026-11-28.json).  Every shape's stages fit
#: ``PIPELINED_SHARED_LIMIT``.  Row-major operands take 128×128 tiles in 32-deep slices, two blocks an SM:
#: as fast as the 128×256 tile on large cubes, and faster where a product's edges leave tiles part empty
#: (1000×3000×777, 3000×1000×2047, 256 batches of 256³).  The integer dtypes take the shapes of the floats
#: of their width, but float64 row-major's 64×128 tile, which was measured for float64 alone.
_SQUARE_128 = TileShape(128, 128, 32, 8, 8, min_blocks=2, stages=2)
_PIPELINED_4_BYTE = {"rr": _SQUARE_128,
                     "rc": TileShape(256, 128, 16, 16, 8, min_blocks=1, stages=3),
                     "cr": TileShape(128, 256, 16, 8, 16, min_blocks=1, unroll=2, stages=3),
                     "cc": _SQUARE_128}
_PIPELINED_8_BYTE = {layouts: TileShape(64, 64, 16, 4, 4, min_blocks=2, stages=4)
                     for layouts in ("rr", "rc", "cr", "cc")}
# float64 row-major: 64×128 tiles, 4×8 outputs a thread, two blocks an SM.  The 128×128 tile of one block an SM
# (252 registers) was as fast until the copies' addresses were worked out once per tile: ptxas then put about 60
# register moves more in its k loop, and it ran slower (tune-tiles-f64-copies-H200-2026-12-02.json).
_PIPELINED_F64_ROW_MAJOR = TileShape(64, 128, 16, 4, 8, min_blocks=2, stages=3)
#: The argmax: the pipelined kernel beat the register-staged one on row-major operands only (by 2.5%, f32);
#: elsewhere it was as fast or slower (f64; column-major B) or spilled (row-major A, column-major B).
_PIPELINED_ARGMAX_4_BYTE = TileShape(128, 128, 16, 8, 8, min_blocks=1, stages=3)
PIPELINED_SHAPES: dict[tuple[str, str, str], TileShape] = {
    **{("forward", d, layouts): shape for d in ("float32", "int32") for layouts, shape in _PIPELINED_4_BYTE.items()},
    **{("forward", d, layouts): shape for d in ("float64", "int64") for layouts, shape in _PIPELINED_8_BYTE.items()},
    ("forward", "float64", "rr"): _PIPELINED_F64_ROW_MAJOR,
    ("forward_argmax", "float32", "rr"): _PIPELINED_ARGMAX_4_BYTE._replace(each_k=_FLOAT_EACH_K),
    ("forward_argmax", "int32", "rr"): _PIPELINED_ARGMAX_4_BYTE,
}
#: The same, for the products with the exact integer path (int32 and int64 under max_plus, min_plus, max_times):
#: the argmax ran 1.36-1.48 times as fast as the register-staged one in every layout, the plain product no faster
#: (tune-tiles-exact-argmax-, tune-tiles-exact-H200-2026-11-28.json).  Half its slice record in shared memory lets
#: its slice loop unroll 1 k group without spills: a shorter compile (issue 32's 2.0 s), and as fast or faster
#: (exact-path-square-argmax-NVIDIA_H200-2026-12-02-a0cb7fd-vs-b43d701.json).
PIPELINED_EXACT_SHAPES: dict[tuple[str, str, str], TileShape] = {
    ("forward_argmax", "int32", layouts): _PIPELINED_ARGMAX_4_BYTE._replace(unroll=1, shared_record=True)
    for layouts in ("rr", "rc", "cr", "cc")}
#: The stream family's own shapes with the exact integer path: the int32 argmax's 128×64 tile (no spills)
#: compiles in about two thirds of the 128×128 one's time and ran as fast on stream products; square products ran
#: slower on it (tune-tiles-i32-argmax-128x64-H200-2026-12-02.json, exact-path-stream-argmax-…-vs-4728b03.json).
STREAM_EXACT_SHAPES: dict[tuple[str, str, str], TileShape] = {
    ("forward_argmax", "int32", layouts): TileShape(128, 64, 16, 8, 4, min_blocks=1, stages=3)
    for layouts in ("rr", "rc", "cr", "cc")}
#: The same, for the rest: 4-byte plain products in mixed layouts, whose 256×128 and 128×256 tiles passed 2.0 s of
#: compile (int32 `max_min`, `min_max`).  rc: 128×128, one block an SM (at two, ptxas spilled); int32 cr: two; float32
#: cr keeps 128×256, which ran faster.  Each as fast or faster on stream products (stream-k-…-vs-3e96ea9.json).
STREAM_SHAPES: dict[tuple[str, str, str], TileShape] = {
    **{("forward", dtype, "rc"): _SQUARE_128._replace(min_blocks=1) for dtype in ("float32", "int32")},
    ("forward", "int32", "cr"): _SQUARE_128}
#: The stream family's shape where the square family's kernel is register-staged (no pipelined shape above), per
#: (op, itemsize): the pipelined shapes of the other dtypes and layouts of that width.  Stream-K serves products
#: whose last wave would run part empty, where evening out the SMs' work gains more than a tile tuned for the
#: layout.  The 4-byte plain one (int32 with the exact path) unrolls 1 k group: at more, ptxas spilled.
_STREAM_FALLBACK: dict[tuple[str, int], TileShape] = {("forward", 4): _SQUARE_128._replace(unroll=1),
                                                      ("forward_argmax", 4): _PIPELINED_ARGMAX_4_BYTE,
                                                      ("forward", 8): _PIPELINED_8_BYTE["rr"],
                                                      ("forward_argmax", 8): _PIPELINED_8_BYTE["rr"]}

#: The fragment of each tile family: "small" is the square kernel with another tile.
_FORWARD_TEMPLATES = {"square": "forward_square.cu", "small": "forward_square.cu", "skinny": "forward_skinny.cu",
                      "vector": "forward_skinny.cu", "thin": "forward_thin.cu",
                      "baseline": "forward_baseline.cu", "stream": "forward_streamed.cu"}

#: The boolean semiring's forward fragment of each of its tiles (``spec.BOOLEAN_TILES``).
_BOOLEAN_TEMPLATES = {"square": "forward_bits.cu", "tensor": "forward_bits_mma.cu"}


def _forward_template(spec: KernelSpec) -> str:
    """The fragment of a forward spec: by tile family, and for the square family by what the kernel needs."""
    if spec.dtype == BOOLEAN_DTYPE:
        return _BOOLEAN_TEMPLATES[spec.tile]
    return "forward_pipelined.cu" if pipelined(spec) and spec.tile == "square" else _FORWARD_TEMPLATES[spec.tile]


#: The fragment of each op that is not a forward, where its file is not named after the op.
_OP_TEMPLATES = {"backward_ordered_a": "backward_ordered.cu", "backward_ordered_b": "backward_ordered.cu",
                 "combine": "split_k_combine.cu", "combine_resolve": "split_k_combine.cu", "gather_index": "gather.cu"}

#: A gather's target type where it is not its source's: int32 argmaxes, and C++'s ``bool`` for truth values,
#: whose conversion writes every nonzero byte as 1 (so the and_or einsum reads uint8 operands through it).
_GATHER_TARGETS = {("gather_index", "int32"): "int", ("gather_index", "int64"): "int",
                   ("gather", BOOLEAN_DTYPE): "bool"}

#: Threads per block of the one-thread-per-element kernels (argmax resolve, gradient scatters).
ELEMENTWISE_THREADS = 256


#: The dynamic shared memory every pipelined shape fits in: the smallest a block may opt into on GPUs of
#: sm_80 and later (sm_86, sm_89 and sm_120; sm_80 allows 163 KiB, sm_90 and sm_100 227 KiB).  On a GPU
#: that allows less (sm_75: 64 KiB) the engine plans the small family instead (``plan_forward``).
PIPELINED_SHARED_LIMIT = 99 * 1024


def pipelined(spec: KernelSpec) -> bool:
    """Whether ``spec`` is the pipelined square kernel (cp.async stages in dynamic shared memory).

    It serves the square family's products in the ops, dtypes and operand
    layouts of ``PIPELINED_SHAPES`` (of ``PIPELINED_EXACT_SHAPES`` for those
    with the exact integer path); the register-staged kernel (square.cuh)
    the rest.  The stream family is always the pipelined kernel, with
    stream-K (``stream_shape``).

    Examples:
        >>> from tropical_gemm.jit import make_spec
        >>> from tropical_gemm.jit.source import pipelined
        >>> [pipelined(make_spec(op, sr, "int32"))
        ...  for op in ("forward", "forward_argmax") for sr in ("max_min", "max_plus")]
        [True, False, True, True]
    """
    return spec.tile == "stream" or (spec.tile == "square"
                                     and _pipelined_key(spec) in pipelined_table(spec.semiring, spec.dtype))


def pipelined_table(semiring: str, dtype: str) -> dict[tuple[str, str, str], TileShape]:
    """The table of pipelined shapes that (semiring, dtype) reads: ``PIPELINED_EXACT_SHAPES`` where its
    integer ⊗ must saturate, else ``PIPELINED_SHAPES``."""
    return PIPELINED_EXACT_SHAPES if needs_exact_path(semiring, dtype) else PIPELINED_SHAPES


def _pipelined_key(spec: KernelSpec) -> tuple[str, str, str]:
    return spec.op, spec.dtype, spec.a_layout[0] + spec.b_layout[0]


def stream_shape(semiring: str, dtype: str, op: str, layouts: str) -> TileShape:
    """The stream family's tile: its own (``STREAM_EXACT_SHAPES`` with the exact path, else ``STREAM_SHAPES``), the
    square family's pipelined shape, or the fallback of its op and width.

    Examples:
        >>> from tropical_gemm.jit.source import stream_shape
        >>> stream_shape("max_plus", "int32", "forward", "rr")[:5]   # int32 max_plus: register-staged square
        (128, 128, 32, 8, 8)
    """
    key = (op, dtype, layouts)
    own = STREAM_EXACT_SHAPES if needs_exact_path(semiring, dtype) else STREAM_SHAPES
    return own.get(key) or pipelined_table(semiring, dtype).get(key) or _STREAM_FALLBACK[(op, np.dtype(dtype).itemsize)]


def tile_shape(spec: KernelSpec) -> TileShape:
    if spec.tile == "stream":
        return stream_shape(spec.semiring, spec.dtype, spec.op, _pipelined_key(spec)[2])
    if pipelined(spec):
        return pipelined_table(spec.semiring, spec.dtype)[_pipelined_key(spec)]
    return TILE_SHAPES[(spec.tile, spec.dtype, spec.op)]


def each_k_depth(spec: KernelSpec) -> int:
    """The deepest K whose argmax ``spec``'s kernel finds by comparing every candidate, keeping each
    output's winning k itself (the smallest on ties); 0 where it never does.  Deeper products record, per
    output, the slice where its value last improved, and a second launch resolves the k from there
    (``engines/cuda/plan.py``): the square and small families' kernels, one slice deep or ``each_k``.
    The stream family always records slices (its K is many slices deep).  The kernel and the planner
    both read it: the kernel as its ``EACH_K``.

    Examples:
        >>> from tropical_gemm.jit import make_spec
        >>> from tropical_gemm.jit.source import each_k_depth
        >>> [each_k_depth(make_spec("forward_argmax", "max_plus", d)) for d in ("float32", "int32")]
        [256, 16]
        >>> each_k_depth(make_spec("forward", "max_plus", "float32"))
        0
    """
    if spec.op != "forward_argmax" or spec.tile not in ("square", "small"):
        return 0
    shape = tile_shape(spec)
    return max(shape.bk, shape.each_k)


def dynamic_shared_bytes(spec: KernelSpec) -> int:
    """The dynamic shared memory ``spec``'s kernel is launched with: the pipelined kernel's stages, else 0.

    An operand's stage is BK × (lines + V) elements, V being 16 bytes of the dtype: kept as [k][line], or as
    [line][k] (lines × (BK + V)) where k is its contiguous axis (A row-major, B column-major); ``shared_record``
    adds the argmax's record of half the block's outputs (an int32 each).  pipelined.cuh checks its own layout
    against this at compile time (``SMEM_BYTES``).

    Examples:
        >>> from tropical_gemm.jit import make_spec
        >>> from tropical_gemm.jit.source import dynamic_shared_bytes
        >>> dynamic_shared_bytes(make_spec("forward", "max_plus", "float64", tile="small"))
        0
    """
    if not pipelined(spec):
        return 0
    shape, itemsize = tile_shape(spec), np.dtype(spec.dtype).itemsize
    pad = 16 // itemsize

    def stage(lines: int, k_contiguous: bool) -> int:
        return lines * (shape.bk + pad) if k_contiguous else shape.bk * (lines + pad)

    per_stage = stage(shape.bm, spec.a_layout == "row") + stage(shape.bn, spec.b_layout == "col")
    shared_record = shape.shared_record and spec.op == "forward_argmax"
    return shape.stages * per_stage * itemsize + (shape.bm * shape.bn // 2 * 4 if shared_record else 0)


@lru_cache(maxsize=None)
def read_cuda_file(filename: str) -> str:
    """The text of a file in ``cuda_src/``, found through the installed package."""
    return resources.files("tropical_gemm").joinpath("cuda_src", filename).read_text(encoding="utf-8")


def header_sources() -> tuple[tuple[str, str], ...]:
    """The shared headers as ``(name, text)`` pairs, in program order.

    The generated header holds the functors of the built-in catalogue (fixed,
    so registering a semiring leaves every other kernel's key alone); a
    registered semiring's functor follows the headers in its own programs.
    """
    return tuple((name, functors_header(CATALOGUE) if name == GENERATED_HEADER else read_cuda_file(name))
                 for name in HEADERS)


def preamble() -> str:
    """Every shared header, concatenated in order: the part of each program before its fragment."""
    return _joined(header_sources())


@lru_cache(maxsize=4)  # the same header objects each call: their hashes are cached, so a hit is cheap
def _joined(headers: tuple[tuple[str, str], ...]) -> str:
    return "\n".join(f"// ---- header: {name}\n{text}" for name, text in headers)


#: Dimensions the ``widen`` cast indexes with strides; arrays with more are cast in slices.
CAST_DIMS = 6


def fragment(spec: KernelSpec) -> str:
    """The rendered instantiation fragment for one spec (without the preamble)."""
    if spec.op in CAST_OPS:  # no semiring: cuda_src/cast.cu holds both directions
        return Template(read_cuda_file("cast.cu")).substitute(
            name=spec.name, threads=ELEMENTWISE_THREADS, widen=int(spec.op == "widen"))
    if spec.op in COUNT_OPS:  # the values compute in the base semiring's functor
        return Template(read_cuda_file(f"{spec.op}.cu")).substitute(
            name=spec.name, semiring=device_type(get_counting_semiring(spec.semiring).base), T=_C_TYPES[spec.dtype],
            overflow_bit=COUNT_OVERFLOW, negative_bit=COUNT_NEGATIVE)
    values = {
        "name": spec.name,
        "semiring": device_type(spec.semiring),
        "T": _C_TYPES[spec.dtype],
    }
    if spec.op in FORWARD_OPS:
        shape = tile_shape(spec)
        values.update(
            argmax="true" if spec.op == "forward_argmax" else "false",
            a_row="true" if spec.a_layout == "row" else "false",
            b_row="true" if spec.b_layout == "row" else "false",
            bm=shape.bm, bn=shape.bn, bk=shape.bk, tm=shape.tm, tn=shape.tn, threads=shape.threads,
            min_blocks=shape.min_blocks, unroll=shape.unroll or "TG_UNROLL", stages=shape.stages,
            smem_bytes=dynamic_shared_bytes(spec), each_k=each_k_depth(spec),
            shared_record="true" if shape.shared_record else "false",
        )
        template = read_cuda_file(_forward_template(spec))
    else:
        values.update(threads=ELEMENTWISE_THREADS)
        if spec.op in ORDERED_BACKWARD_OPS:
            operand = "a" if spec.op == "backward_ordered_a" else "b"
            values.update(operand=operand, to_a="true" if operand == "a" else "false")
        if spec.op in ("combine", "combine_resolve"):
            values.update(resolve="true" if spec.op == "combine_resolve" else "false")
        if spec.op in ("gather", "gather_index"):
            values.update(S=_C_TYPES[spec.dtype], D=_GATHER_TARGETS.get((spec.op, spec.dtype), _C_TYPES[spec.dtype]))
        template = read_cuda_file(_OP_TEMPLATES.get(spec.op, f"{spec.op}.cu"))
    return Template(template).substitute(values)


#: NVRTC's ``--Ofast-compile`` level per tile family.  The small family
#: serves products too small to fill the GPU, where the first call waits
#: mostly for the compile: "min" cuts its compile by a fifth and still
#: unrolls the tile (levels "mid" and up keep the accumulators in local
#: memory).  No level changes numerics: that takes fast-math, never used.
_FAST_COMPILE = {"small": "min", "baseline": "min"}
#: The small kernels around products take it too: they are bound by memory,
#: and a first call waits for their compile.  Not ``combine_resolve``: its
#: argmax resolve loop ran a third slower at "min"; nor ``stream_fixup``,
#: which ran at half speed.
_FAST_COMPILE_OPS = ("combine", "merge", "fill", "gather", "gather_index", "argmax_offset", "walk", "pack_bits")


def kernel_options(spec: KernelSpec) -> tuple[str, ...]:
    """NVRTC options of this kernel beyond the target's; part of its cache key.

    Examples:
        >>> from tropical_gemm.jit import make_spec
        >>> from tropical_gemm.jit.source import kernel_options
        >>> kernel_options(make_spec("forward", "max_plus", "float32", tile="small"))
        ('--Ofast-compile=min',)
        >>> kernel_options(make_spec("forward", "max_plus", "float32"))
        ()
    """
    level = _FAST_COMPILE.get(spec.tile) if spec.op in FORWARD_OPS else None
    if spec.op in _FAST_COMPILE_OPS:
        level = "min"
    return () if level is None else (f"--Ofast-compile={level}",)


def kernel_source(spec: KernelSpec) -> str:
    """The complete program for one spec: the headers (``preamble()``) plus its fragment.

    This text is what NVRTC compiles and what the cache key hashes.

    Examples:
        >>> from tropical_gemm.jit import kernel_source, make_spec
        >>> source = kernel_source(make_spec("forward", "max_plus", "float32"))
        >>> 'extern "C" __global__' in source and "tg_forward_max_plus_f32_rr_square" in source
        True
    """
    return f"{preamble()}{_registered_functor(spec)}\n// ---- fragment: {spec.name}\n{fragment(spec)}"


def _registered_functor(spec: KernelSpec) -> str:
    """The functor of a semiring added with ``register_semiring``, which the shared headers lack."""
    if not spec.semiring or spec.op in COUNT_OPS:  # the counting semirings' bases are in the catalogue
        return ""
    sr = get_semiring(spec.semiring)
    if any(sr is built_in for built_in in CATALOGUE):
        return ""
    return f"\n// ---- registered semiring: {sr.name}\nnamespace tg {{\n{functor(sr)}\n}}  // namespace tg"
