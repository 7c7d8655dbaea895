"""CUDA graphs of tropical products: capture a call once, replay it for the cost of one launch.

A product of small matrices spends its time in Python (validation, the plan
lookup, the launches' arguments), not on the GPU, so calls back to back
leave the GPU idle between kernels.  ``graphed`` runs a function of cupy
arrays once as usual, then captures its launches into a CUDA graph; each
call of the result replays the graph, none of the Python runs again.

What a replay needs that a plain stream capture does not give:

* the tuned kernels, not the baseline ones that serve while tuned ones
  compile in the background (``tropical_gemm.jit``'s tiering): the warm-up
  waits for those compiles, and a launch after it swaps them in;
* memory that lives as long as the graph: outputs, and the scratch memory of
  K slices and stream-K, which the engine frees after each call.  A graph
  keeps writing to the addresses it captured, so every allocation made
  during the capture is held here until the graph is gone, and the capture
  stream waits for each replay before CuPy's pool may hand that memory out;
* inputs at fixed addresses: the arguments are copied once into buffers of
  their own, which each call refills from the arrays it is given.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

from .engines import array_kind, cupy_module, device_only


class GraphCaptureError(RuntimeError):
    """The function did something a CUDA graph cannot hold (a copy to the host, a synchronisation)."""


def graphed(fn: Callable[..., Any], *args: Any, warmup: int = 1) -> "GraphedCall":
    """``fn(*args)`` captured into a CUDA graph, to be replayed by calling the result.

    ``args`` are the function's cupy arrays (other arguments are passed as
    given and captured with it); ``fn`` calls ``tropical_gemm.matmul`` or
    ``einsum`` on them, or any CuPy operation that launches work on the
    current stream and never reads a result on the host.  ``fn`` runs
    ``warmup`` times as usual first (compiling what it needs), then once
    under capture.

    Calling the result with arrays of the captured shapes and dtypes copies
    them into the graph's inputs and replays it on CuPy's current stream;
    with no arguments it replays on the inputs of the last call.  It returns
    what ``fn`` returned at the capture: the same arrays every time,
    overwritten by the next replay (copy a result that must outlive it).

    Examples:
        >>> import cupy as cp, tropical_gemm as tg  # doctest: +SKIP
        >>> a = cp.random.rand(256, 256, dtype=cp.float32); b = a.T.copy()  # doctest: +SKIP
        >>> step = tg.graphed(lambda x, y: tg.matmul(x, y, "max_plus"), a, b)  # doctest: +SKIP
        >>> c = step(a, b)   # one graph launch; the same values as tg.matmul(a, b)  # doctest: +SKIP
    """
    if warmup < 1:
        raise ValueError(f"warmup must be at least 1 (the first run compiles and allocates), got {warmup}")
    for position, x in enumerate(args):
        if _is_array(x) and array_kind(x) != "cuda":
            raise TypeError(f"graphed captures GPU work, but argument {position} is a host array "
                            f"({type(x).__module__}.{type(x).__name__}): pass cupy arrays")
    from . import jit  # here: ``import tropical_gemm`` leaves the JIT to the first GPU call

    cupy = cupy_module()
    caller = cupy.cuda.get_current_stream()
    inputs = tuple(_buffer_like(x, cupy) if _is_array(x) else x for x in args)
    stream = cupy.cuda.Stream(non_blocking=True)
    stream.wait_event(caller.record())  # the inputs' copies, made on the caller's stream
    held: list[Any] = []
    with stream:
        for _ in range(warmup):
            fn(*inputs)
        jit.wait()
        fn(*inputs)  # a launch after the background compiles swaps the tuned kernels in, outside the capture
        stream.synchronize()
        baseline_launches = jit.stats()["baseline_launches"]
        with cupy.cuda.using_allocator(_holding(cupy.cuda.get_allocator(), held)), \
                device_only("graphed"):
            result, graph = _capture(stream, fn, inputs, cupy)
    if jit.stats()["baseline_launches"] > baseline_launches:
        warnings.warn("graphed: the graph holds a baseline kernel, because a tuned kernel failed to compile "
                      "in the background; its replays are correct but slow.  Run with TROPICAL_GEMM_TIERED=0 "
                      "to see the compile error", RuntimeWarning, stacklevel=2)
    return GraphedCall(result, graph, inputs, stream, held)


class GraphedCall:
    """A captured call (see ``graphed``): call it to replay; ``outputs`` are the arrays each replay writes."""

    def __init__(self, outputs: Any, graph: Any, inputs: tuple, stream: Any, held: list) -> None:
        self.outputs, self._graph, self._inputs = outputs, graph, inputs
        self._stream, self._held = stream, held

    def __call__(self, *args: Any) -> Any:
        cupy = cupy_module()
        if args:
            self._refill(args, cupy)
        caller = cupy.cuda.get_current_stream()
        self._graph.launch(caller)
        # CuPy's pool orders reuse of the held memory on the capture stream: it must wait for this replay
        self._stream.wait_event(caller.record())
        return self.outputs

    def _refill(self, args: tuple, cupy: Any) -> None:
        if len(args) != len(self._inputs):
            raise TypeError(f"this graph was captured with {len(self._inputs)} arguments, got {len(args)}")
        for position, (given, captured) in enumerate(zip(args, self._inputs)):
            if not _is_array(captured):
                if given is not captured and given != captured:
                    raise ValueError(f"argument {position} was captured as {captured!r}, got {given!r}: "
                                     "a graph replays what it captured; capture another for other values")
                continue
            if array_kind(given) != "cuda" or given.shape != captured.shape or given.dtype != captured.dtype:
                raise ValueError(f"argument {position}: the graph reads a {_describe(captured)} "
                                 f"array, got {_describe(given)}; capture another graph for other shapes")
            if given.data.ptr != captured.data.ptr:
                _copy(given, captured, cupy)

    def __del__(self) -> None:
        """The held memory returns to CuPy's pool when this goes, so the last replay must be over first."""
        stream = getattr(self, "_stream", None)
        if stream is not None:
            try:
                stream.synchronize()
            except cupy_module().cuda.runtime.CUDARuntimeError:  # the context is gone (interpreter exit)
                pass


def _capture(stream: Any, fn: Callable[..., Any], inputs: tuple, cupy: Any) -> tuple[Any, Any]:
    """(fn's result, the graph) of one run of ``fn`` under capture; the capture is ended whatever happens."""
    stream.begin_capture()
    try:
        result = fn(*inputs)
    except RuntimeError as exc:  # CuPy's refusals (a copy to the host), the driver's, and device_only's
        _end_abandoned(stream, cupy)
        raise GraphCaptureError(f"graphed: {fn!r} failed under capture: {exc}. A CUDA graph cannot hold a copy "
                                "to the host, a synchronisation or a product of host arrays: keep those outside "
                                "the graphed function") from exc
    except BaseException:
        _end_abandoned(stream, cupy)
        raise
    try:
        return result, stream.end_capture()
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise GraphCaptureError(f"graphed: the capture of {fn!r} was invalidated ({exc}): something in it "
                                "synchronised or read device memory on the host; keep that outside the "
                                "graphed function") from exc


def _end_abandoned(stream: Any, cupy: Any) -> None:
    """End a failed capture so that the stream can run work again; its graph, if any, is dropped."""
    try:
        stream.end_capture()
    except cupy.cuda.runtime.CUDARuntimeError:  # an invalidated capture ends with an error, and is over
        pass


def _holding(allocate: Callable[[int], Any], held: list) -> Callable[[int], Any]:
    """An allocator that keeps every block it hands out alive in ``held``."""
    def allocate_and_hold(nbytes: int) -> Any:
        block = allocate(nbytes)
        held.append(block)
        return block
    return allocate_and_hold


def _buffer_like(x: Any, cupy: Any) -> Any:
    """A copy of ``x`` in memory of the graph's own, in ``x``'s memory order where it has one."""
    buffer = cupy.empty_like(x, order="K")
    cupy.copyto(buffer, x)
    return buffer


def _copy(source: Any, target: Any, cupy: Any) -> None:
    """``target[...] = source`` on the current stream: one memcpy where their layouts match (a fraction of
    ``copyto``'s host time, which is most of a small replay's)."""
    dense = source.flags.c_contiguous or source.flags.f_contiguous
    if dense and source.strides == target.strides:
        cupy.cuda.runtime.memcpyAsync(target.data.ptr, source.data.ptr, source.nbytes,
                                      cupy.cuda.runtime.memcpyDeviceToDevice, cupy.cuda.get_current_stream().ptr)
    else:
        cupy.copyto(target, source)


def _is_array(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


def _describe(x: Any) -> str:
    return f"{getattr(x, 'dtype', type(x).__name__)} {tuple(getattr(x, 'shape', ()))}"
