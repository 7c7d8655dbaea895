"""Launch planning: which kernel, on what grid, with which scalar arguments, from shapes and strides alone.

Pure: nothing here imports CuPy, loads a kernel or needs a GPU, so every
decision (tile family, orientation, layout, batch folding, K slices) can be
tested on any machine.  A ``Plan`` is one kernel launch with plain ``int``
arguments; ``binding.bind`` turns it into a launchable kernel on a device.
Plans are cached per call signature, so a repeated call (a training loop, a
small product in a Python loop) spends its host time on the launch and not
on re-deriving them.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from ...jit.source import (ELEMENTWISE_THREADS, TILE_SHAPES, TileShape, dynamic_shared_bytes, each_k_depth,
                           tile_shape)
from ...jit.spec import KernelSpec, make_spec
from ...shapes import ProductShape
from .batching import KERNEL_BATCH_DIMS, Problem, batch_strides, contiguous_strides, fold_batch
from .launch import GRID_LIMIT, Plan, aligned, elementwise_grid
from .resolve import plan_resolve

#: Products whose smaller side (M, or N after transposing) is at most this
#: many rows use the skinny family: a square tile would leave most lanes idle.
SKINNY_MAX_ROWS = 16

#: The tile families whose argmax records slices, resolved to the exact k by a second launch where K is
#: deeper than ``source.each_k_depth`` (the skinny, vector and thin kernels compare every candidate; the
#: baseline is one pass).
RESOLVED_TILES = ("square", "small")

#: K slices are at least this deep when a product is split along K.
MIN_SPLIT_K = 256

_NULL = 0  # the argmax address of a launch without one

#: A forward launch's scalars: M, N, K, six strides, the batch count and ``Problem.batch_args()``.
FORWARD_SCALARS = 18


class ForwardPlan(NamedTuple):
    """A forward product: its kernel, the argmax resolve that follows it, and the baseline it runs on meanwhile.

    ``baseline`` is the same product by the baseline family (one thread per
    output, argmax in one pass), with the same arguments: it serves while the
    tuned kernel compiles in the background.  ``swap_operands``: the plan
    computes C^T = B^T ⊗ A^T.  ``splits`` > 1 means: run as K slices instead.
    ``b_copy``: the resolve reads B transposed (k-contiguous), which this
    launch writes, from B, into scratch memory at ``b_copy_offset``.
    ``work``: the product is the stream family's, whose workspace starts the
    scratch memory, and ``fixup`` merges the tiles its blocks cut between
    them.  ``scratch_bytes``: all the scratch memory a launch takes.
    """

    product: Plan
    resolve: Plan | None
    baseline: Plan
    swap_operands: bool
    splits: int
    b_copy: Plan | None = None
    scratch_bytes: int = 0
    work: "StreamWork | None" = None
    fixup: Plan | None = None

    @property
    def b_copy_offset(self) -> int:
        """Where B's copy starts in the scratch memory: after the stream-K workspace, if any."""
        return 0 if self.work is None else aligned(self.work.nbytes)

    @property
    def spec(self) -> KernelSpec:
        return self.product.spec

    @property
    def companions(self) -> tuple[KernelSpec, ...]:
        """Kernels launched after the product's own: the stream-K fixup, B's copy and the argmax resolve, where
        the plan has them."""
        return tuple(plan.spec for plan in (self.fixup, self.b_copy, self.resolve) if plan is not None)

    def without_resolve(self) -> "ForwardPlan":
        """The product alone: its argmax left as recorded, for a later launch to resolve."""
        return self._replace(resolve=None, b_copy=None, scratch_bytes=0 if self.work is None else self.work.nbytes)

    def addresses(self, a: Any, b: Any, c: Any, idx: Any) -> tuple:
        """The kernels' leading arguments, in their order: operands swapped where the plan transposed."""
        first, second = (b, a) if self.swap_operands else (a, b)
        return first, second, c, _NULL if idx is None else idx


def choose_tile(m: int, n: int, k: int, batches: int, dtype: str, op: str, sms: int,
                semiring: str = "max_plus") -> tuple[str, bool]:
    """The tile family, and whether to compute C^T = B^T ⊗ A^T so the short side is M.

    * "thin" when K and M or N are short enough for all of B to sit in
      shared memory (its tile's BK × BN): a row of C per thread;
    * "vector" when M or N is 1 (a matrix-vector product), "skinny" when it
      is at most ``SKINNY_MAX_ROWS``: a square tile would leave most lanes
      idle;
    * "square", the tuned tiles (``source.tile_shape``), when its blocks,
      K slices included, fill at least 3/4 of the blocks the SMs hold at
      once (the tile's residency), and more than the dtype's ``_USEFUL`` of their
      outputs lie inside C;
    * "small", a 32×32 tile, otherwise: a product too small to fill the GPU
      with large tiles gets up to 16 times as many blocks, and its kernel
      compiles in about a third of the time, which a first call waits for;
      a batch of matrices much smaller than the square tile computes
      padding in most of each square block.
    """
    thin = TILE_SHAPES[("thin", dtype, op)]
    if k <= thin.bk and min(m, n) <= thin.bn:
        return "thin", m < n
    if min(m, n) <= SKINNY_MAX_ROWS:
        return "vector" if min(m, n) == 1 else "skinny", n < m
    spec = make_spec(op, semiring, dtype)
    square = tile_shape(spec)
    tiles_m, tiles_n = -(-m // square.bm), -(-n // square.bn)
    tiles = tiles_m * tiles_n * batches
    blocks = tiles * k_splits(tiles, k, sms, square.min_blocks, slice_least(spec))
    fills = blocks >= int(sms * square.min_blocks * _FILLED)
    if fills and m * n > _USEFUL.get(dtype, 0.0) * tiles_m * square.bm * tiles_n * square.bn:
        return "square", False
    return "small", False


#: The share of the SMs' resident blocks the square family's blocks (K slices included) must fill to be chosen:
#: 1000×3000×777 fills 85% of them (four K slices of 56 tiles of 128×128) and runs faster square, the cases
#: of benchmarks/tile_families.py that take the small family fill at most 55%.
_FILLED = 3 / 4
#: Per dtype, the share of the square tiles' outputs that must lie inside C for the square family to be chosen
#: (none where the dtype is missing): below it a batch of small matrices computes mostly padding, and the small
#: family, whose tiles it fills, ran faster.  int32's small kernel (with the exact path) is slower beside its
#: square one, so it takes over only where less of the tile lies inside C (benchmarks/small_batches.py;
#: docs/performance.md, "Batches of small matrices").
_USEFUL = {"float32": 1 / 4, "float64": 1 / 4, "int64": 1 / 4, "int32": 1 / 8}


def k_splits(tiles: int, k: int, sms: int, waves: int = 2, least: int = MIN_SPLIT_K) -> int:
    """K slices to run side by side where the output's tiles leave the GPU's waves part empty.

    ⊕ is exact and associative, so slices combine to the same bits; the
    argmax keeps the earliest slice that attains the result.  ``waves`` is
    the blocks each SM runs at once.  The count taken is the one whose
    modelled time is least (``_sliced_time``): the waves its blocks need,
    each as long as a slice plus a block's fixed cost, and the partial
    results written and combined.  That avoids a second, nearly empty
    wave: 56 tiles in 5 slices need 280 blocks, one wave of 264 and 16
    more, where 4 slices fit in one.  ``least``: the shortest slice
    (``slice_least``).
    """
    slots = waves * sms
    if tiles >= _SPLIT_WAVES * slots or k < 2 * least:
        return 1
    most = min(k // least, -(-_SPLIT_WAVES * slots // tiles))
    return min(range(1, most + 1), key=lambda splits: _sliced_time(tiles, k, slots, splits))


def slice_least(spec: KernelSpec) -> int:
    """The shortest K slice of ``spec``'s products: ``MIN_SPLIT_K``, and for an argmax deeper than the K its
    kernel compares every candidate of (``source.each_k_depth``).  Sliced products have few outputs and a
    long K, where the combine's one resolve costs little: compared in every slice, each multiply-add would
    pay for a compare and a select instead."""
    return max(MIN_SPLIT_K, each_k_depth(spec) + 1)


#: Products with at least this many waves of tiles are never sliced: their last wave is a small part.
_SPLIT_WAVES = 4
#: A block's fixed cost (its pipeline's fill, its epilogue), in k steps of its own loop.
_BLOCK_K = 64
#: One slice's partial results, written and read again by the combine, in k steps of a full wave per
#: wave's worth of outputs: 8 bytes an output at memory speed against 2 operations a k step.
_PARTIAL_K = 33


def _sliced_time(tiles: int, k: int, slots: int, splits: int) -> float:
    """The modelled time of ``splits`` K slices, in k steps of one full wave."""
    waves = -(-tiles * splits // slots)
    return waves * (k / splits + _BLOCK_K) + (splits > 1) * _PARTIAL_K * splits * tiles / slots


class StreamWork(NamedTuple):
    """A stream-K launch (streamed.cuh): its grid and its workspace, which the fixup (``stream_fixup``) reads.

    The workspace holds a job for the fixup per block (``FIXUP_JOB_BYTES``),
    two partial tiles per block from ``values_offset``, and their argmaxes at
    ``index_offset`` (if any): ``nbytes`` in all.  Nothing in it needs
    clearing: every block writes its job, and the fixup reads only the
    partials the kernel wrote.
    """

    grid: int
    values_offset: int
    index_offset: int
    nbytes: int

    @property
    def scalars(self) -> tuple[int, int]:
        """The stream kernel's scalars after a forward's."""
        return self.values_offset, self.index_offset


def stream_work(tiles: int, k: int, sms: int, shape: TileShape, itemsize: int, argmax: bool,
                square_blocks: int, square_slots: int) -> StreamWork | None:
    """The stream-K launch of a product of ``tiles`` tiles of ``shape``, or None where the square family does as well.

    Stream-K shares every tile's slices out evenly over one wave of blocks,
    so it fills the SMs whatever the tile count; its price is the partial
    tiles' store and merge (a launch of its own: ``stream_fixup``), and a
    main loop a few percent slower (benchmarks/stream_k.py).  It is taken
    where the output's tiles fit in one wave, each block gets at least
    ``_STREAM_MIN_SLICES`` slices, and the square family's blocks, K slices
    included (``square_blocks`` for ``square_slots`` resident at once),
    would leave over ``1 - _SQUARE_FILLED`` of a wave's slots empty or take
    more than one wave (each of which pays a block's fixed costs again):
    1000×3000×777's 56 tiles of 128×128 in 4 K slices fill 224 of 264 slots;
    its argmax's, of one block an SM, take 3 waves of 7 slices.
    """
    slots = sms * shape.min_blocks
    slices = tiles * -(-k // shape.bk)
    square_waves = -(-square_blocks // square_slots)
    if (tiles > slots or slices < _STREAM_MIN_SLICES * slots or slices >= 2**31
            or (square_waves == 1 and square_blocks >= _SQUARE_FILLED * square_slots)):
        return None
    partials = 2 * slots * shape.bm * shape.bn
    values_offset = aligned(slots * FIXUP_JOB_BYTES)
    index_offset = aligned(values_offset + partials * itemsize)
    return StreamWork(slots, values_offset, index_offset, index_offset + (partials * 4 if argmax else 0))


#: The size of streamed.cuh's ``FixupJob``: five 64-bit integers.
FIXUP_JOB_BYTES = 40


def stream_fixup(work: StreamWork, semiring: str, dtype: str, shape: TileShape, scalars: tuple[int, ...]) -> Plan:
    """The launch that merges a stream-K product's cut tiles (stream_fixup.cu): a block per band of
    ``_FIXUP_ROWS`` rows of the tile each stream block finished.

    ``scalars``: the stream kernel's forward scalars (M, N, K, strides, ...).
    """
    m, n, _, _, _, _, _, c_sm, c_sn = scalars[:9]
    parts = -(-shape.bm // _FIXUP_ROWS)
    return Plan(make_spec("stream_fixup", semiring, dtype), work.grid * parts, ELEMENTWISE_THREADS,
                (work.values_offset, work.index_offset, m, n, c_sm, c_sn, shape.bm, shape.bn, work.grid, parts))


#: Rows of a cut tile per fixup block: 1,024 outputs of a 128-wide tile, four a thread.
_FIXUP_ROWS = 8


#: Stream-K's conditions (``stream_work``), from benchmarks/stream_k.py on an H200: where the square family's K
#: slices filled 256 of 264 slots in one wave (1024³, 1024×4096×1024) stream-K ran 3-6% slower; at 224 of 264
#: (1000×3000×777) 15-17% faster, and 10% faster than its argmax's 3 waves; with one and a half waves of whole
#: tiles (3000×1000×2047) 5% slower.  A block's slices on average, at least: its fixed costs stay small.
_SQUARE_FILLED = 0.9
_STREAM_MIN_SLICES = 8


def _blocks_per_sm(shape: TileShape, tile: str) -> int:
    """What the K slices of a product aim to fill: the square kernels' residency, two blocks elsewhere."""
    return shape.min_blocks if tile == "square" else 2


def layout(row_stride: int, col_stride: int) -> str:
    """"row" when the operand's last axis is the closer one in memory."""
    return "row" if abs(col_stride) <= abs(row_stride) else "col"


@lru_cache(maxsize=1024)
def plan_forward(a_shape: tuple[int, ...], a_strides: tuple[int, ...], b_shape: tuple[int, ...],
                 b_strides: tuple[int, ...], batch: tuple[int, ...], dtype: str, semiring: str,
                 argmax: bool, sms: int, may_split: bool, shared_limit: "int | None" = None) -> ForwardPlan:
    """The launch for one batched product; strides are in elements, batch has at most 3 folded dims.

    ``shared_limit``: the shared memory a block may opt into on the device (None: enough for any kernel).
    A square product whose pipelined kernel needs more takes the small family instead.
    """
    m, k = a_shape[-2:]
    n = b_shape[-1]
    op = "forward_argmax" if argmax else "forward"
    a_sm, a_sk = a_strides[-2:]
    b_sk, b_sn = b_strides[-2:]
    c_sm, c_sn = n, 1
    dims, (sa, sb) = fold_batch(batch, [batch_strides(a_shape, a_strides, batch),
                                        batch_strides(b_shape, b_strides, batch)])
    batches = math.prod(dims)
    tile, transpose = choose_tile(m, n, k, batches, dtype, op, sms, semiring)
    if transpose:  # C^T (N×M) = B^T (N×K) ⊗ A^T (K×M): every ⊗ commutes
        m, n = n, m
        a_sm, a_sk, b_sk, b_sn = b_sn, b_sk, a_sk, a_sm
        c_sm, c_sn = c_sn, c_sm
        sa, sb = sb, sa
    spec = make_spec(op, semiring, dtype, a_layout=layout(a_sm, a_sk), b_layout=layout(b_sk, b_sn), tile=tile)
    if shared_limit is not None and dynamic_shared_bytes(spec) > shared_limit:
        tile = "small"
        spec = make_spec(op, semiring, dtype, a_layout=spec.a_layout, b_layout=spec.b_layout, tile=tile)
    shape = tile_shape(spec)
    tiles = -(-m // shape.bm) * -(-n // shape.bn) * batches
    splits = k_splits(tiles, k, sms, _blocks_per_sm(shape, tile), slice_least(spec)) if may_split else 1
    work = None
    if may_split and tile == "square":
        stream = make_spec(op, semiring, dtype, a_layout=spec.a_layout, b_layout=spec.b_layout, tile="stream")
        stream_shape = tile_shape(stream)
        if shared_limit is None or dynamic_shared_bytes(stream) <= shared_limit:
            work = stream_work(-(-m // stream_shape.bm) * -(-n // stream_shape.bn) * batches, k, sms, stream_shape,
                               np.dtype(dtype).itemsize, argmax, tiles * splits, sms * shape.min_blocks)
        if work is not None:
            spec, shape, splits = stream, stream_shape, 1
    scalars = (m, n, k, a_sm, a_sk, b_sk, b_sn, c_sm, c_sn, batches, *Problem(m, n, k, dims, (sa, sb)).batch_args())
    per_output = elementwise_grid(m * n * batches)  # one thread per output: the baseline's grid
    scratch_bytes = 0 if work is None else work.nbytes
    resolve, b_copy = None, None
    if argmax and tile in RESOLVED_TILES and k > each_k_depth(spec):
        # the square argmax left slices' first k in idx (a K of at most each_k_depth: the winners themselves,
        # no resolve)
        resolve, b_copy, copy_bytes = plan_resolve(semiring, dtype, scalars, shape.bk, b_shape, b_strides,
                                                   shared_limit)
        if b_copy is not None:
            scratch_bytes = aligned(scratch_bytes) + copy_bytes
    baseline = make_spec(op, semiring, dtype, tile="baseline")
    fixup = None
    if work is None:
        product = Plan(spec, min(tiles, GRID_LIMIT), shape.threads, scalars, shared_bytes=dynamic_shared_bytes(spec))
    else:
        product = Plan(spec, work.grid, shape.threads, scalars + work.scalars, shared_bytes=dynamic_shared_bytes(spec))
        fixup = stream_fixup(work, semiring, dtype, shape, scalars)
    return ForwardPlan(
        product=product, resolve=resolve, baseline=Plan(baseline, per_output, tile_shape(baseline).threads, scalars),
        swap_operands=transpose, splits=splits, b_copy=b_copy, scratch_bytes=scratch_bytes, work=work, fixup=fixup,
    )


@lru_cache(maxsize=1024)
def plan_backward(op: str, a_shape: tuple[int, ...], a_strides: tuple[int, ...], b_shape: tuple[int, ...],
                  b_strides: tuple[int, ...], batch: tuple[int, ...], dtype: str, semiring: str) -> Plan:
    """The launch of one backward op; strides are in elements, the gradients are contiguous.

    Its leading arguments are (grad_c, a, b, argmax), then the gradients it writes.
    """
    m, k = a_shape[-2:]
    n = b_shape[-1]
    shapes_strides = ((a_shape, a_strides), (b_shape, b_strides), (a_shape, contiguous_strides(a_shape)),
                      (b_shape, contiguous_strides(b_shape)))
    dims, folded = fold_batch(batch, [batch_strides(shape, strides, batch) for shape, strides in shapes_strides])
    problem = Problem(m, n, k, dims, tuple(folded))
    scalars = (m, n, k, *a_strides[-2:], *b_strides[-2:], problem.batches, *problem.batch_args())
    if op == "backward":  # one thread per output element
        work = problem.batches * m * n
    else:  # one thread per row of grad_a, or column of grad_b, of each operand batch
        to_a = op == "backward_ordered_a"
        operand_batches = math.prod((a_shape if to_a else b_shape)[:-2])
        work = operand_batches * (m if to_a else n)
        scalars += (operand_batches,)
    return Plan(make_spec(op, semiring, dtype), elementwise_grid(work), ELEMENTWISE_THREADS, scalars)


def nothing_to_reduce(out_shape: tuple[int, ...], k: int) -> bool:
    """No output element, or no k to reduce over: no kernel has anything to read (callers fill what K = 0 asks)."""
    return 0 in out_shape or k == 0


def one_launch_each(shape: ProductShape, argmax: bool) -> bool:
    """Whether each of a product's kernels takes it in one launch on addresses alone.

    Not when there is nothing to reduce (no outputs, or K = 0: callers fill
    those), when the batch has more dims than a kernel indexes, or when an
    argmax needs 64-bit indices (K >= 2**31).
    """
    return not (nothing_to_reduce(shape.out_shape, shape.k) or len(shape.batch) > KERNEL_BATCH_DIMS
                or (argmax and shape.k >= 2**31))
