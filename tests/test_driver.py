"""The ctypes driver layer, against a recording stand-in for libcuda (runs without a GPU).

What is checked here is what ctypes cannot check for us: that each argument
reaches the kernel as the bytes of its C type, in order, bound scalars after
the leading addresses; that launches go to the stream asked for; that a
function's context is made current only when it is not; and that failures
name the call and the driver's error.  The GPU suite launches every kernel
through this layer on a real driver.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tropical_gemm.jit import driver


class FakeArray:
    """Anything with ``.data.ptr``, as a cupy array has."""

    class _Data:
        def __init__(self, ptr: int) -> None:
            self.ptr = ptr

    def __init__(self, ptr: int) -> None:
        self.data = self._Data(ptr)


class FakeDriver:
    """Records launches; decodes each parameter with the C type the test expects."""

    def __init__(self, current: int = 0x1000) -> None:
        self.current = current
        self.pushed: list[int] = []
        self.calls: list[str] = []
        self.launches: list[dict] = []
        self.fail: dict[str, int] = {}

    def _record(self, name: str) -> int:
        self.calls.append(name)
        return self.fail.get(name, 0)

    def cuGetErrorName(self, status, out):
        out._obj.value = b"CUDA_ERROR_INVALID_IMAGE"
        return 0

    def cuCtxGetCurrent(self, out):
        out._obj.value = self.pushed[-1] if self.pushed else self.current
        return self._record("cuCtxGetCurrent")

    def cuCtxPushCurrent_v2(self, ctx):
        self.pushed.append(ctx.value)
        return self._record("push")

    def cuCtxPopCurrent_v2(self, out):
        self.pushed.pop()
        return self._record("pop")

    def cuModuleLoadData(self, out, image):
        out._obj.value = 0x2000
        return self._record("cuModuleLoadData")

    def cuModuleGetFunction(self, out, module, name):
        out._obj.value = 0x3000
        return self._record("cuModuleGetFunction")

    def cuDeviceGet(self, out, ordinal):
        out._obj.value = ordinal
        return self._record("cuDeviceGet")

    def cuDevicePrimaryCtxRetain(self, out, device):
        out._obj.value = 0x1000 + device.value
        return self._record("cuDevicePrimaryCtxRetain")

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        current = self.pushed[-1] if self.pushed else self.current
        if current != 0x1000:  # the functions here live in device 0's primary context
            self.calls.append("refused launch")
            return 201  # CUDA_ERROR_INVALID_CONTEXT
        # the driver copies the parameters during the call, and so does this stand-in: after it they may be gone
        self.launches.append({"function": function.value, "grid": (gx, gy, gz), "block": (bx, by, bz),
                              "stream": stream.value or 0, "params": [ctypes.string_at(p, 8) for p in params]})
        return self._record("cuLaunchKernel")


@pytest.fixture
def fake(monkeypatch):
    lib = FakeDriver()
    monkeypatch.setattr(driver, "library", lambda: lib)
    monkeypatch.setattr(driver, "_primary", {})
    return lib


def _read(params, index: int, ctype: type):
    return ctype.from_buffer_copy(params[index][:ctypes.sizeof(ctype)]).value


def test_arguments_reach_the_kernel_as_their_c_types(fake):
    function = driver.load_function(b"cubin", "tg_kernel", 0)
    bound = function.bind((7,), (256,), (2**40 + 3, np.int32(-5), np.float32(1.5)))
    bound.launch((FakeArray(0xABC0), 0xDEF0, None), stream=0x77)
    (launch,) = fake.launches
    assert launch["function"] == 0x3000 and launch["stream"] == 0x77
    assert launch["grid"] == (7, 1, 1) and launch["block"] == (256, 1, 1)
    params = launch["params"]
    assert [_read(params, i, ctypes.c_uint64) for i in range(3)] == [0xABC0, 0xDEF0, 0]
    assert _read(params, 3, ctypes.c_int64) == 2**40 + 3
    assert _read(params, 4, ctypes.c_int32) == -5
    assert _read(params, 5, ctypes.c_float) == 1.5
    assert len(params) == 6


def test_repeated_launches_reuse_their_slots_and_each_passes_its_own_values(fake):
    function = driver.load_function(b"cubin", "tg_kernel", 0)
    bound = function.bind((1,), (32,), (np.int32(9),))
    for leading in ((FakeArray(0x10), 5, None), (FakeArray(0x20), -3, 0x30), (np.int32(-2), 7, 8)):
        bound.launch(leading, stream=0)
    first, second, narrow = (launch["params"] for launch in fake.launches)
    assert [_read(first, i, ctypes.c_int64) for i in range(3)] == [0x10, 5, 0]
    assert [_read(second, i, ctypes.c_int64) for i in range(3)] == [0x20, -3, 0x30]
    assert _read(narrow, 0, ctypes.c_int32) == -2 and _read(narrow, 1, ctypes.c_int64) == 7  # packed per launch
    assert all(_read(params, 3, ctypes.c_int32) == 9 for params in (first, second, narrow))


def test_the_call_form_of_cupy_function_packs_everything_per_launch(fake):
    function = driver.load_function(b"cubin", "tg_kernel", 0)
    function((3, 2), (128,), (np.int64(9), 4), stream=5)
    params = fake.launches[0]["params"]
    assert fake.launches[0]["grid"] == (3, 2, 1)
    assert (_read(params, 0, ctypes.c_int64), _read(params, 1, ctypes.c_int64)) == (9, 4)


def test_no_stream_means_cupys_current_stream_or_the_null_stream(fake, monkeypatch):
    function = driver.load_function(b"cubin", "tg_kernel", 0)
    monkeypatch.delitem(__import__("sys").modules, "cupy", raising=False)
    function((1,), (1,), ())
    assert fake.launches[-1]["stream"] == 0


def test_the_functions_context_is_pushed_only_when_another_is_current(fake):
    function = driver.load_function(b"cubin", "tg_kernel", 0)  # device 0's primary context: 0x1000
    fake.calls.clear()
    function((1,), (1,), (7,), stream=0)
    assert fake.calls == ["cuLaunchKernel"]  # one driver call, no context query
    for other in (0x1001, 0):  # device 1 current on this thread, then no context at all
        fake.current = other
        fake.calls.clear()
        function((1,), (1,), (7,), stream=0)
        assert fake.calls == ["refused launch", "cuCtxGetCurrent", "push", "cuLaunchKernel", "pop"]
    assert len(fake.launches) == 3 and fake.pushed == []
    assert all(_read(launch["params"], 0, ctypes.c_int64) == 7 for launch in fake.launches)


def test_a_failed_call_names_the_call_and_the_drivers_error(fake):
    fake.fail["cuModuleLoadData"] = 200
    with pytest.raises(driver.DriverError, match=r"cuModuleLoadData failed: CUDA_ERROR_INVALID_IMAGE \(200\)"):
        driver.load_function(b"not a cubin", "tg_kernel", 0)
    assert isinstance(driver.DriverError("x"), RuntimeError)  # the registry's load-error handling catches it


def test_an_unsupported_argument_is_a_type_error_naming_the_type():
    with pytest.raises(TypeError, match="unsupported kernel argument of type str"):
        driver.kernel_argument("12")


def test_a_missing_driver_library_says_what_to_do(monkeypatch):
    monkeypatch.setattr(driver, "_LIBRARY_NAMES", ("libcuda-that-does-not-exist.so.1",))
    driver._initialised_library.cache_clear()
    try:
        with pytest.raises(driver.DriverError, match="not loadable.*NVIDIA driver.*numpy arrays"):
            driver.library()
    finally:
        driver._initialised_library.cache_clear()
