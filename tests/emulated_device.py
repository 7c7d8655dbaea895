"""An emulated device for the einsum replay's tests: memory is a numpy byte array, addresses offsets into it.

``FakeCupy`` stands for the few CuPy names ``einsum.replay`` uses, and
``fake_binder`` for its ``_bind``: each op of the program becomes a launch
that numpy runs at the addresses the replay passes, so the replay's own
work (signature cache, layout, the addresses of every launch, the operand
swap of a transposed product, K slices' scratch) runs without a GPU.
``jit_helpers.RecordingTiers`` stands for tiering over kernels that record
their launches instead, so that the replay's real binding runs too.
"""

from __future__ import annotations

import contextlib
import types

import numpy as np

import tropical_gemm as tg
from tropical_gemm.einsum import program as prog
from tropical_gemm.einsum.lower import reduce_rows_cpu
from tropical_gemm.semirings import get_semiring


class Memory:
    """A flat byte array standing for device memory: addresses are offsets into it (0 is never handed out)."""

    def __init__(self, nbytes: int = 1 << 22) -> None:
        self.bytes = np.random.default_rng(9).integers(0, 256, nbytes, dtype=np.uint8)  # garbage, as cupy.empty
        self.top = prog.ALIGN

    def alloc(self, nbytes: int) -> int:
        at = self.top
        self.top += prog.aligned(max(nbytes, 1))
        return at

    def view(self, address: int, shape, strides, dtype) -> np.ndarray:
        return np.ndarray(shape, dtype, buffer=self.bytes, offset=address, strides=tuple(strides))


class Pointer:
    def __init__(self, memory: Memory, ptr: int) -> None:
        self.memory, self.ptr, self.device_id = memory, ptr, 0

    def __add__(self, offset: int) -> "Pointer":
        return Pointer(self.memory, self.ptr + offset)


class DeviceArray:
    """What the replay reads of a cupy array: shape, strides, dtype and ``data`` (address and device)."""

    def __init__(self, memory: Memory, x: np.ndarray) -> None:
        lo = sum(s * (n - 1) for s, n in zip(x.strides, x.shape) if s < 0)
        hi = sum(s * (n - 1) for s, n in zip(x.strides, x.shape) if s > 0) + x.itemsize
        self.data = Pointer(memory, memory.alloc(hi - lo) - lo)
        self.shape, self.strides, self.dtype, self.itemsize = x.shape, x.strides, x.dtype, x.itemsize
        memory.view(self.data.ptr, x.shape, x.strides, x.dtype)[...] = x


class FakeCupy:
    """The few CuPy names the replay uses, over ``Memory``."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.cuda = types.SimpleNamespace(Device=lambda device: contextlib.nullcontext(),
                                          get_current_stream=lambda: types.SimpleNamespace(ptr=7))

    def empty(self, nbytes: int, dtype) -> DeviceArray:
        array = DeviceArray.__new__(DeviceArray)
        array.data = Pointer(self.memory, self.memory.alloc(nbytes))
        return array

    def ndarray(self, shape, dtype, memptr: Pointer) -> np.ndarray:
        dtype = np.dtype(dtype)
        strides = [s * dtype.itemsize for s in prog.contiguous_strides(tuple(shape))]
        return self.memory.view(memptr.ptr, shape, strides, dtype)


class Kernel:
    """A bound launch that runs one op of the program with numpy, at the addresses it is given."""

    def __init__(self, memory: Memory, op, semiring: str, dtype: np.dtype, swap: bool = False) -> None:
        self.memory, self.op, self.semiring, self.dtype, self.swap = memory, op, semiring, dtype, swap

    def at(self, address: int, view) -> np.ndarray:
        return self.memory.view(address, view.shape, [s * self.dtype.itemsize for s in view.strides], self.dtype)

    def out(self, address: int, shape, dtype=None) -> np.ndarray:
        dtype = np.dtype(dtype or self.dtype)
        return self.memory.view(address, shape, [s * dtype.itemsize for s in prog.contiguous_strides(shape)], dtype)

    def launch(self, addresses, stream) -> None:
        assert stream == 7
        op = self.op
        if isinstance(op, prog.Copy):
            src, dst = addresses
            self.out(dst, op.src.shape)[...] = self.at(src, op.src)
        elif isinstance(op, prog.Rows):
            x, out, idx = addresses
            values, index = reduce_rows_cpu(self.at(x, op.x), get_semiring(self.semiring))
            self.out(out, values.shape)[...] = values
            self.out(idx, index.shape, np.int32)[...] = index
        else:
            first, second, out, idx = addresses[:4]
            a, b = (second, first) if self.swap else (first, second)
            assert (idx == 0) == (op.argmax is None)
            values, index = tg.matmul(self.at(a, op.a), self.at(b, op.b), self.semiring, argmax=True)
            self.out(out, values.shape)[...] = values
            if idx:
                self.out(idx, index.shape, np.int32)[...] = index


def fake_binder(memory: Memory):
    """``replay._bind`` over the emulated device: every product as a prepared one with the real forward plan
    (operands swapped where it transposes), every third as a split one whose scratch is filled with garbage."""
    from tropical_gemm.engines.cuda import plan_forward

    count = [0]

    def bind(op, dtype, semiring, device):
        dt = np.dtype(dtype)
        if not isinstance(op, prog.Product):
            return Kernel(memory, op, semiring, dt), 0
        count[0] += 1
        plan = plan_forward(op.a.shape, op.a.strides, op.b.shape, op.b.strides, op.a.shape[:1], dtype, semiring,
                            op.argmax is not None, 132, True)
        kernel = Kernel(memory, op, semiring, dt, plan.swap_operands)
        if count[0] % 3:
            return types.SimpleNamespace(plan=plan, kernels=(kernel,), scratch_bytes=0), 0

        def split_launch(a, b, c, idx, stream, scratch):
            memory.bytes[scratch:scratch + 512] = 255  # the partials' scratch: never where anything lives
            Kernel(memory, op, semiring, dt).launch((a, b, c, 0 if idx is None else idx), stream)

        return types.SimpleNamespace(launch=split_launch, scratch_bytes=512), 512

    return bind


