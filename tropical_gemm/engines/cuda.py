"""The CUDA engine: picks a kernel spec for each call and launches it through CuPy.

Every decision that depends on the arrays (tile family, orientation, layout,
how the batch dimensions fold) is made here from shapes and strides; the
kernels themselves take any strides, so no operand is ever copied.  Launches
go to CuPy's current stream and nothing here synchronises the device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from ..dtypes import dtype_name
from . import cupy_module
from ..jit import KernelSpec, driver, get_function, make_spec, tiers
from ..jit.source import ELEMENTWISE_THREADS, TILE_SHAPES, tile_shape
from ..jit.spec import ORDERED_BACKWARD_OPS
from ..semirings import Semiring
from ..shapes import ProductShape, product_shape
from . import cuda_aux

NAME = "cuda"

#: Products whose smaller side (M, or N after transposing) is at most this
#: many rows use the skinny family: a square tile would leave most lanes idle.
SKINNY_MAX_ROWS = 16

#: Batch dimensions a kernel indexes itself; more are folded or looped over.
KERNEL_BATCH_DIMS = 3

_GRID_LIMIT = 2**31 - 1


_cupy = cupy_module  # the one cupy import (tropical_gemm.engines.cupy_module)


# --------------------------------------------------------------- array glue


def as_array(x: Any):
    """A cupy array viewing ``x`` (cupy, CUDA array interface, or CUDA DLPack), no copy.

    Without a usable GPU, CuPy's own error here is a bare CUDA status (such as
    ``cudaErrorInsufficientDriver``), so it is replaced by one that says what
    happened and what to do; the check runs only once the conversion failed.
    """
    cupy = _cupy()
    if isinstance(x, cupy.ndarray):
        return x
    try:
        if hasattr(x, "__cuda_array_interface__"):
            return cupy.asarray(x)
        return cupy.from_dlpack(x)
    except Exception as exc:
        if cupy.is_available():
            raise
        raise RuntimeError(
            f"a GPU array ({type(x).__module__}.{type(x).__name__}) was passed, but CuPy finds no usable CUDA GPU "
            f"({exc}). Check that nvidia-smi lists a GPU and that CUDA_VISIBLE_DEVICES does not hide it, "
            "or pass numpy arrays to compute on the CPU; 'python -m tropical_gemm info' shows what is usable"
        ) from exc


def empty(shape: tuple[int, ...], dtype: np.dtype, like: Any):
    """A new array on ``like``'s GPU, which need not be the current device."""
    with like.device:
        return _cupy().empty(shape, dtype=dtype)


def is_c_contiguous(x: Any) -> bool:
    return bool(x.flags.c_contiguous)


def may_share_memory(x: Any, y: Any) -> bool:
    return bool(_cupy().may_share_memory(x, y))


def _device_of(*arrays: Any):
    """The one device all arrays live on; arrays on several devices are a ``ValueError``."""
    ids = {x.device.id for x in arrays}
    if len(ids) > 1:
        raise ValueError(f"all arrays must be on one GPU, got arrays on devices {sorted(ids)}")
    return _cupy().cuda.Device(ids.pop())


# ------------------------------------------------------------ batch folding


def _element_strides(x: Any) -> tuple[int, ...]:
    return tuple(s // x.itemsize for s in x.strides)


def batch_strides(operand_shape: tuple[int, ...], operand_strides: tuple[int, ...], batch: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of an operand's batch dims over the broadcast batch; 0 where it broadcasts."""
    own = len(operand_shape) - 2
    out = []
    for d in range(len(batch)):
        od = d - (len(batch) - own)
        out.append(0 if od < 0 or operand_shape[od] == 1 else operand_strides[od])
    return tuple(out)


def fold_batch(batch: tuple[int, ...], strides: list[tuple[int, ...]]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Merge batch dims that every array walks with one stride; drop size-1 dims.

    The result indexes the same elements in the same (row-major) order, which
    both the kernels' batch loop and the deterministic gradient order rely on.
    """
    dims: list[int] = []
    folded: list[list[int]] = [[] for _ in strides]
    for d, size in enumerate(batch):
        if size == 1:
            continue
        if dims and all(f[-1] == s[d] * size for f, s in zip(folded, strides)):
            dims[-1] *= size
            for f, s in zip(folded, strides):
                f[-1] = s[d]
            continue
        dims.append(size)
        for f, s in zip(folded, strides):
            f.append(s[d])
    return tuple(dims), [tuple(f) for f in folded]


def _padded(values: tuple[int, ...], fill: int) -> tuple[int, ...]:
    return (fill,) * (KERNEL_BATCH_DIMS - len(values)) + tuple(values)


@dataclass(frozen=True)
class Launch:
    """A batched problem in the form the kernels take: sizes, strides, folded batch."""

    m: int
    n: int
    k: int
    batch_dims: tuple[int, ...]
    batch_strides: tuple[tuple[int, ...], ...]

    @property
    def batches(self) -> int:
        return math.prod(self.batch_dims)

    def batch_args(self) -> list[int]:
        """``d1, d2`` then each array's three padded batch strides."""
        dims = _padded(self.batch_dims, 1)
        args = [dims[1], dims[2]]
        for s in self.batch_strides:
            args += list(_padded(s, 0))
        return args


def kernel_ints(values: Any) -> tuple:
    """64-bit kernel arguments (the kernels' ``i64`` and pointers): plain ints, which ``jit.driver`` packs as such."""
    return tuple(int(v) for v in values)


def _split_batches(batch: tuple[int, ...], arrays: list[Any]):
    """Yield (sub-arrays, batch) pieces whose batch folds into the kernels' dims.

    Almost every call yields once.  Only a batch with more independent dims
    than a kernel indexes is split on its leading dim, in ascending order, so
    the deterministic gradient order is kept.
    """
    if len(batch) <= KERNEL_BATCH_DIMS:
        yield arrays, batch
        return
    strides = [batch_strides(x.shape, _element_strides(x), batch) for x in arrays]
    dims, _ = fold_batch(batch, strides)
    if len(dims) <= KERNEL_BATCH_DIMS:
        yield arrays, batch
        return
    for i in range(batch[0]):
        yield from _split_batches(batch[1:], [_leading_slice(x, i, len(batch)) for x in arrays])


def _leading_slice(x: Any, i: int, batch_ndim: int) -> Any:
    """``x`` at index ``i`` of the broadcast batch's leading dim (as broadcasting reads it)."""
    if x.ndim - 2 < batch_ndim:
        return x
    return x[0] if x.shape[0] == 1 else x[i]


# ------------------------------------------------------------------ forward


def choose_tile(m: int, n: int, k: int, batches: int, dtype: str, op: str, sms: int) -> tuple[str, bool]:
    """The tile family, and whether to compute C^T = B^T ⊗ A^T so the short side is M.

    * "skinny" when M or N is at most ``SKINNY_MAX_ROWS``: a square tile would
      leave most lanes idle;
    * "square", the tuned register tile (128×128 for 4-byte types), when its
      blocks, K slices included, give every SM at least one;
    * "small", a 32×32 tile, otherwise: a product too small to fill the GPU
      with large tiles gets up to 16 times as many blocks, and its kernel
      compiles in about a third of the time, which a first call waits for.
    """
    if min(m, n) <= SKINNY_MAX_ROWS:
        return "skinny", n < m
    square = TILE_SHAPES[("square", dtype, op)]
    tiles = -(-m // square.bm) * -(-n // square.bn) * batches
    if tiles * k_splits(tiles, k, sms) >= sms:
        return "square", False
    return "small", False


def _layout(row_stride: int, col_stride: int) -> str:
    """"row" when the operand's last axis is the closer one in memory."""
    return "row" if abs(col_stride) <= abs(row_stride) else "col"


def forward(a: Any, b: Any, semiring: Semiring, out: Any, argmax_out: Any) -> None:
    """Launch the forward kernel(s) writing ``out`` (and ``argmax_out``)."""
    k = a.shape[-1]
    with _device_of(a, b, out, *(() if argmax_out is None else (argmax_out,))):
        if out.size == 0:
            return
        if k == 0:
            cuda_aux.fill_zero(out, argmax_out, semiring.name)
            return
        if argmax_out is not None and k >= 2**31:
            raise ValueError(f"argmax on the GPU supports K < 2**31, got K={k}")
        _forward_batched(a, b, out, argmax_out, semiring, out.shape[:-2], may_split=True)


def _forward_batched(a: Any, b: Any, c: Any, idx: Any, semiring: Semiring, batch: tuple[int, ...],
                     *, may_split: bool) -> None:
    arrays = [a, b, c] + ([] if idx is None else [idx])
    for (sa, sb, sc, *si), sub_batch in _split_batches(batch, arrays):
        _forward_launch(sa, sb, sc, si[0] if si else None, semiring, sub_batch, may_split=may_split)


class BoundKernel(NamedTuple):
    """A loaded kernel with its grid, block and trailing scalar arguments: a launch adds only the addresses.

    Plans make these for each launch; prepared products (below) keep them,
    so that a repeated call does not even look its kernels up.
    """

    function: Any
    grid: tuple[int]
    block: tuple[int]
    scalars: tuple

    def launch(self, addresses: tuple, stream: Any) -> None:
        """Queue it on ``stream`` (None: cupy's current one); ``addresses`` are arrays, or kernel-ready ints."""
        self.function(self.grid, self.block, (*addresses, *self.scalars), stream=stream)


#: K slices are at least this deep when a product is split along K.
MIN_SPLIT_K = 256


@lru_cache(maxsize=None)
def _sm_count(device_id: int) -> int:
    """One attribute query, through the driver (no CuPy import on the torch path)."""
    return driver.multiprocessor_count(device_id)


def k_splits(tiles: int, k: int, sms: int) -> int:
    """K slices to run side by side when the output alone has too few tiles to fill the GPU.

    ⊕ is exact and associative, so slices combine to the same bits; the
    argmax keeps the earliest slice that attains the result.
    """
    if tiles >= sms or k < 2 * MIN_SPLIT_K:
        return 1
    return max(1, min(-(-2 * sms // tiles), k // MIN_SPLIT_K))


@dataclass(frozen=True)
class ForwardPlan:
    """Everything a forward launch needs that follows from shapes and strides alone.

    Plans are cached per call signature, so a repeated call (a training loop,
    a small product in a Python loop) spends its host time on the launch and
    not on re-deriving the tile family, layout, batch folding and arguments.
    ``splits`` > 1 means: run as K slices instead (see ``_split_k``).
    """

    spec: KernelSpec
    grid: int
    block: int
    scalars: tuple
    swap_operands: bool
    resolve: "KernelSpec | None"
    resolve_grid: int
    resolve_depth: np.int32
    splits: int

    @property
    def companions(self) -> tuple[KernelSpec, ...]:
        """Kernels launched after the product's own: the argmax resolve, if the tile needs one."""
        return () if self.resolve is None else (self.resolve,)

    def kernels(self, device: int) -> tuple[Any, ...]:
        """The launches on ``device``, kernels loaded; while the tuned kernel compiles, a ``TieredForward``."""
        if tiers().serve_baseline(self.spec, device, self.companions, start=False):
            baseline = self.baseline_kernel(device)  # first, alone: the call waits for this compile only
            if tiers().serve_baseline(self.spec, device, self.companions):
                return (TieredForward(self, device, baseline),)
        return self.tuned_kernels(device)

    def tuned_kernels(self, device: int) -> tuple[BoundKernel, ...]:
        """The tuned product, then the argmax resolve if the tile needs one."""
        product = BoundKernel(tiers().get_function(self.spec, device), (self.grid,), (self.block,), self.scalars)
        if self.resolve is None:
            return (product,)
        # the square argmax left slice numbers in idx: the resolve reads the same arguments, and the slice depth
        resolve = BoundKernel(tiers().get_function(self.resolve, device), (self.resolve_grid,),
                              (ELEMENTWISE_THREADS,), self.scalars + (self.resolve_depth,))
        return product, resolve

    def baseline_kernel(self, device: int) -> BoundKernel:
        """The same product by the baseline family: same arguments, one thread per output, argmax in one pass."""
        spec = make_spec(self.spec.op, self.spec.semiring, self.spec.dtype, tile="baseline")
        return BoundKernel(get_function(spec, device), (self.resolve_grid,), (tile_shape(spec).threads,),
                           self.scalars)

    def addresses(self, a: Any, b: Any, c: Any, idx: Any) -> tuple:
        """The kernels' leading arguments, in their order: operands swapped where the plan transposed."""
        first, second = (b, a) if self.swap_operands else (a, b)
        return first, second, c, _NULL if idx is None else idx

    def launch(self, a: Any, b: Any, c: Any, idx: Any, device: int, stream: Any = None) -> None:
        """Queue the kernel(s) on ``stream`` (default: cupy's current one); arrays are cupy arrays or addresses."""
        addresses = self.addresses(a, b, c, idx)
        for kernel in self.kernels(device):
            kernel.launch(addresses, stream)


_NULL = 0  # the argmax pointer of a launch without one


class TieredForward:
    """A forward launch whose tuned kernel compiles in the background: the baseline until it is servable.

    Prepared products keep their launches, so the swap to the tuned kernels
    happens here, at the first launch after the background compile is done.
    """

    __slots__ = ("plan", "device", "baseline", "tuned")

    def __init__(self, plan: ForwardPlan, device: int, baseline: BoundKernel) -> None:
        self.plan, self.device, self.baseline = plan, device, baseline
        self.tuned: tuple[BoundKernel, ...] | None = None

    def launch(self, addresses: tuple, stream: Any) -> None:
        tuned = self.tuned
        if tuned is None:
            if tiers().serve_baseline(self.plan.spec, self.device, self.plan.companions):
                tiers().count_baseline(self.plan.spec)
                self.baseline.launch(addresses, stream)
                return
            tuned = self.tuned = self.plan.tuned_kernels(self.device)
        for kernel in tuned:
            kernel.launch(addresses, stream)


@lru_cache(maxsize=1024)
def plan_forward(a_shape: tuple[int, ...], a_strides: tuple[int, ...], b_shape: tuple[int, ...],
                 b_strides: tuple[int, ...], batch: tuple[int, ...], dtype: str, semiring: str,
                 argmax: bool, sms: int, may_split: bool) -> ForwardPlan:
    """The launch for one batched product; strides are in elements, batch has at most 3 folded dims."""
    m, k = a_shape[-2:]
    n = b_shape[-1]
    op = "forward_argmax" if argmax else "forward"
    a_sm, a_sk = a_strides[-2:]
    b_sk, b_sn = b_strides[-2:]
    c_sm, c_sn = n, 1
    dims, (sa, sb) = fold_batch(batch, [batch_strides(a_shape, a_strides, batch),
                                        batch_strides(b_shape, b_strides, batch)])
    batches = math.prod(dims)
    tile, transpose = choose_tile(m, n, k, batches, dtype, op, sms)
    if transpose:  # C^T (N×M) = B^T (N×K) ⊗ A^T (K×M): every ⊗ commutes
        m, n = n, m
        a_sm, a_sk, b_sk, b_sn = b_sn, b_sk, a_sk, a_sm
        c_sm, c_sn = c_sn, c_sm
        sa, sb = sb, sa
    spec = make_spec(op, semiring, dtype, a_layout=_layout(a_sm, a_sk), b_layout=_layout(b_sk, b_sn), tile=tile)
    shape = tile_shape(spec)
    launch = Launch(m, n, k, dims, (sa, sb))
    tiles = -(-m // shape.bm) * -(-n // shape.bn) * batches
    splits = k_splits(tiles, k, sms) if may_split else 1
    scalars = (m, n, k, a_sm, a_sk, b_sk, b_sn, c_sm, c_sn, batches)
    resolve = make_spec("argmax_resolve", semiring, dtype) if argmax and tile != "skinny" else None
    return ForwardPlan(
        spec=spec, grid=min(tiles, _GRID_LIMIT), block=shape.threads,
        scalars=kernel_ints(scalars + tuple(launch.batch_args())), swap_operands=transpose, resolve=resolve,
        # one thread per output: the resolve's grid, and the baseline kernel's
        resolve_grid=max(1, min(-(-m * n * batches // ELEMENTWISE_THREADS), _GRID_LIMIT)),
        resolve_depth=np.int32(shape.bk), splits=splits,
    )


def _forward_launch(a: Any, b: Any, c: Any, idx: Any, semiring: Semiring, batch: tuple[int, ...],
                    *, may_split: bool) -> None:
    plan = plan_forward(a.shape, _element_strides(a), b.shape, _element_strides(b), batch, dtype_name(c.dtype),
                        semiring.name, idx is not None, _sm_count(c.device.id), may_split)
    if plan.splits > 1:
        _split_k(a, b, c, idx, semiring, batch, plan.splits)
    else:
        plan.launch(a, b, c, idx, c.device.id)


def _split_k(a: Any, b: Any, c: Any, idx: Any, semiring: Semiring, batch: tuple[int, ...], splits: int) -> None:
    """One launch over ``splits`` equal K slices (as an extra batch dim), one for any rest, then ⊕ them."""
    cupy = _cupy()
    from cupy.lib.stride_tricks import as_strided

    # the ⊕ of the slices compiles beside the slices' kernel, not after it
    tiers().prefetch([cuda_aux.combine_spec(semiring.name, dtype_name(c.dtype))], c.device.id)
    k = a.shape[-1]
    chunk = k // splits
    rest = k - splits * chunk
    count = splits + (rest > 0)
    parts = cupy.empty((count, *c.shape), dtype=c.dtype)
    idx_parts = None if idx is None else cupy.empty((count, *c.shape), dtype=np.int32)
    # Give both operands the full batch rank first, so that the slice dim leads both.
    a_full = a[(None,) * (len(batch) + 2 - a.ndim)]
    b_full = b[(None,) * (len(batch) + 2 - b.ndim)]
    a_slices = as_strided(a_full, (splits, *a_full.shape[:-1], chunk), (chunk * a.strides[-1], *a_full.strides))
    b_slices = as_strided(b_full, (splits, *b_full.shape[:-2], chunk, b.shape[-1]),
                          (chunk * b.strides[-2], *b_full.strides))
    _forward_batched(a_slices, b_slices, parts[:splits], None if idx is None else idx_parts[:splits],
                     semiring, (splits, *batch), may_split=False)
    if rest:
        _forward_batched(a[..., splits * chunk:], b[..., splits * chunk:, :], parts[splits],
                         None if idx is None else idx_parts[splits], semiring, batch, may_split=False)
    cuda_aux.combine_slices(parts, idx_parts, c, idx, semiring.name, chunk)


# ----------------------------------------------------------------- backward


def backward(grad_c: Any, a: Any, b: Any, argmax: Any, semiring: Semiring, deterministic: bool,
             grad_a: Any, grad_b: Any) -> None:
    """Write the gradients of a product, reduced over broadcast dims, into ``grad_a``/``grad_b``.

    See ``api.matmul_backward``; the kernels scatter into zeroed, contiguous gradients.
    """
    with _device_of(grad_c, a, b, argmax, grad_a, grad_b):
        grad_c = cuda_aux.contiguous(grad_c)
        argmax = cuda_aux.contiguous(argmax, index=True)
        for grad in (grad_a, grad_b):  # one memset each: fill(0) would launch an elementwise kernel
            grad.data.memset_async(0, grad.nbytes)
        if _nothing_to_reduce(grad_c.shape, a.shape[-1]):
            return
        batch = grad_c.shape[:-2]
        for (sg, si, sa, sb, sga, sgb), sub_batch in _split_batches(batch, [grad_c, argmax, a, b, grad_a, grad_b]):
            for op, grads in backward_launches(deterministic, sga, sgb):
                plan = plan_backward(op, sa.shape, _element_strides(sa), sb.shape, _element_strides(sb), sub_batch,
                                     dtype_name(sa.dtype), semiring.name)
                plan.launch((sg, sa, sb, si), grads, sa.device.id)


def backward_launches(deterministic: bool, grad_a: Any, grad_b: Any) -> tuple[tuple[str, tuple], ...]:
    """(op, the gradients it writes) of each launch of a backward.

    By default one atomic launch writes both, reading each output's gradient
    and argmax once; the deterministic mode needs one ordered launch per
    operand, since each owns rows of grad_a or columns of grad_b.
    """
    if deterministic:
        return ("backward_ordered_a", (grad_a,)), ("backward_ordered_b", (grad_b,))
    return (("backward", (grad_a, grad_b)),)


@dataclass(frozen=True)
class BackwardPlan:
    """One gradient scatter's kernel, grid and scalar arguments, cached per call signature."""

    spec: KernelSpec
    grid: int
    scalars: tuple

    def kernel(self, device: int) -> BoundKernel:
        """The launch on ``device``, kernel loaded."""
        return BoundKernel(tiers().get_function(self.spec, device), (self.grid,), (ELEMENTWISE_THREADS,),
                           self.scalars)

    def launch(self, inputs: tuple, grads: tuple, device: int, stream: Any = None) -> None:
        """Queue it: ``inputs`` are (grad_c, a, b, argmax), arrays or addresses, as are ``grads``."""
        self.kernel(device).launch((*inputs, *grads), stream)


@lru_cache(maxsize=1024)
def plan_backward(op: str, a_shape: tuple[int, ...], a_strides: tuple[int, ...], b_shape: tuple[int, ...],
                  b_strides: tuple[int, ...], batch: tuple[int, ...], dtype: str, semiring: str) -> BackwardPlan:
    """The launch of one backward op; strides are in elements, the gradients are contiguous."""
    m, k = a_shape[-2:]
    n = b_shape[-1]
    grad_a_strides = _contiguous_strides(a_shape)
    grad_b_strides = _contiguous_strides(b_shape)
    shapes_strides = ((a_shape, a_strides), (b_shape, b_strides), (a_shape, grad_a_strides), (b_shape, grad_b_strides))
    dims, folded = fold_batch(batch, [batch_strides(shape, strides, batch) for shape, strides in shapes_strides])
    launch = Launch(m, n, k, dims, tuple(folded))
    scalars = (m, n, k, *a_strides[-2:], *b_strides[-2:], launch.batches, *launch.batch_args())
    if op == "backward":  # one thread per output element
        work = launch.batches * m * n
    else:  # one thread per row of grad_a, or column of grad_b, of each operand batch
        to_a = op == "backward_ordered_a"
        operand_batches = math.prod((a_shape if to_a else b_shape)[:-2])
        work = operand_batches * (m if to_a else n)
        scalars += (operand_batches,)
    return BackwardPlan(make_spec(op, semiring, dtype), max(1, min(-(-work // ELEMENTWISE_THREADS), _GRID_LIMIT)),
                        kernel_ints(scalars))


def prefetch_backward(dtype: str, semiring: str, device: int, deterministic: bool) -> None:
    """Start compiling the backward kernels of a product now, in the background, where they are not cached.

    For callers that know a backward will follow (a torch forward that
    requires grad): its compile then overlaps the forward's.
    """
    ops = ORDERED_BACKWARD_OPS if deterministic else ("backward",)
    tiers().prefetch([make_spec(op, semiring, dtype) for op in ops], device)


def backward_compiling(dtype: str, semiring: str, device: int) -> bool:
    """Whether the default backward kernel of a product is still compiling in the background."""
    return tiers().compiling(make_spec("backward", semiring, dtype), device)


def _nothing_to_reduce(out_shape: tuple[int, ...], k: int) -> bool:
    """No output element, or no k to reduce over: no kernel has anything to read (callers fill what K = 0 asks)."""
    return 0 in out_shape or k == 0


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


# ------------------------------------------------------ prepared products


def _one_launch_each(shape: ProductShape, argmax: bool) -> bool:
    """Whether each of a product's kernels takes it in one launch on addresses alone.

    Not when there is nothing to reduce (no outputs, or K = 0: callers fill
    those), when the batch has more dims than a kernel indexes, or when an
    argmax needs 64-bit indices (K >= 2**31).
    """
    return not (_nothing_to_reduce(shape.out_shape, shape.k) or len(shape.batch) > KERNEL_BATCH_DIMS
                or (argmax and shape.k >= 2**31))


class PreparedProduct(NamedTuple):
    """The forward launches of one product signature, kernels loaded: a call passes only addresses.

    For callers whose memory lives in another library's tensors and who call
    the same signature again and again (the torch bridge in a training
    loop): wrapping each buffer in a cupy array, or deriving the plan and
    looking the kernels up, costs more host time than launching a small
    product.
    """

    plan: ForwardPlan
    kernels: tuple[BoundKernel, ...]
    device: int

    def launch(self, a: int, b: int, c: int, idx: int | None, stream: Any) -> None:
        """Queue ``c = a ⊗ b`` (and the argmax into ``idx``, if the signature has one) on ``stream``.

        Addresses of memory on ``device``; ``c`` and ``idx`` new and C-contiguous.
        """
        addresses = self.plan.addresses(a, b, c, idx)
        for kernel in self.kernels:  # each launch makes its kernel's context current where it is not
            kernel.launch(addresses, stream)


@lru_cache(maxsize=1024)
def prepare_product(a_shape: tuple[int, ...], a_strides: tuple[int, ...], b_shape: tuple[int, ...],
                    b_strides: tuple[int, ...], dtype: str, semiring: str, argmax: bool,
                    device: int) -> PreparedProduct | None:
    """The prepared forward of a product signature (strides in elements), or None where it is not one launch.

    Cached, as the signatures a training loop repeats are few.  Everything
    that is not one launch (empty outputs, K = 0, K slices, batches that need
    splitting, argmax with K >= 2**31) gives None: call ``forward`` on cupy
    arrays.  The caller checks the operands (``product_shape`` and dtypes).
    """
    shape = product_shape(a_shape, b_shape)
    if not _one_launch_each(shape, argmax):
        return None
    plan = plan_forward(a_shape, a_strides, b_shape, b_strides, shape.batch, dtype, semiring, argmax,
                        _sm_count(device), True)
    if plan.splits > 1:
        return None
    return PreparedProduct(plan, plan.kernels(device), device)


class PreparedBackward(NamedTuple):
    """The default (atomic) backward of one product signature, kernel loaded: a call passes only addresses.

    The torch bridge prepares it in the forward, because the backward runs on
    autograd's CUDA worker thread, where each Python step costs more than on
    the calling thread: there it is two memsets and one launch.
    """

    kernel: BoundKernel
    grad_bytes: tuple[int, int]
    device: int

    def launch(self, grad_c: int, a: int, b: int, argmax: int, grad_a: int, grad_b: int, stream: Any) -> None:
        """Zero ``grad_a`` and ``grad_b`` and scatter ``grad_c`` into them, on ``stream``.

        Addresses of memory on ``device``: the product's operands and its int32
        argmax, ``grad_c`` C-contiguous and shaped like the product, the
        gradients new and C-contiguous.
        """
        with driver.on_context(self.kernel.function.context):
            driver.memset_async(grad_a, self.grad_bytes[0], stream)
            driver.memset_async(grad_b, self.grad_bytes[1], stream)
            self.kernel.launch((grad_c, a, b, argmax, grad_a, grad_b), stream)


@lru_cache(maxsize=1024)
def prepare_backward(a_shape: tuple[int, ...], a_strides: tuple[int, ...], b_shape: tuple[int, ...],
                     b_strides: tuple[int, ...], dtype: str, semiring: str, device: int) -> PreparedBackward | None:
    """The prepared default-mode backward of a product signature, or None where it needs cupy arrays.

    None where there is nothing to scatter (no outputs, K = 0: the gradients
    are zeros), where the batch needs splitting, and for K >= 2**31 (an
    int64 argmax).  Cached like ``prepare_product``; float dtypes only.
    """
    shape = product_shape(a_shape, b_shape)
    if not _one_launch_each(shape, argmax=True):
        return None
    plan = plan_backward("backward", a_shape, a_strides, b_shape, b_strides, shape.batch, dtype, semiring)
    itemsize = np.dtype(dtype).itemsize
    return PreparedBackward(plan.kernel(device), (itemsize * math.prod(a_shape), itemsize * math.prod(b_shape)),
                            device)
