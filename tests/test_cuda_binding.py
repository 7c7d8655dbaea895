"""Binding and prepared launches without a GPU: a recording stand-in takes the place of each loaded kernel.

The GPU suite runs these paths for real; here the arguments each launch
would pass to CuPy are checked on any machine: the grid and block of each
Plan, the scalars converted once to CuPy's ``CIntptr`` (the resolve's slice
depth an int32), the baseline until the tuned kernel is servable, and the
prepared backward's memsets on the caller's stream.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

cupy = pytest.importorskip("cupy")

from tropical_gemm.engines import cuda  # noqa: E402
from tropical_gemm.engines.cuda import binding, gpu, prepared  # noqa: E402

SIGNATURE = ((256, 512), (512, 1), (512, 300), (300, 1), "float32", "max_plus")


class Recorder:
    """A loaded kernel that records its launches."""

    def __init__(self, spec: Any, launches: list) -> None:
        self.spec, self.launches = spec, launches

    def __call__(self, grid: tuple, block: tuple, args: tuple, stream: Any = None) -> None:
        self.launches.append((self.spec.tile if self.spec.op.startswith("forward") else self.spec.op,
                              grid, block, args, stream))


class Tiers:
    """Tiering that serves the baseline while ``compiling`` is set."""

    def __init__(self, launches: list) -> None:
        self.launches, self.compiling = launches, True

    def serve_baseline(self, spec: Any, device: int, companions: tuple = (), *, start: bool = True) -> bool:
        return self.compiling

    def get_function(self, spec: Any, device: int) -> Recorder:
        return Recorder(spec, self.launches)

    def count_baseline(self, spec: Any) -> None:
        self.launches.append(("counted",))


class Stream:
    ptr = 1234


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list:
    recorded: list = []
    tiers = Tiers(recorded)
    monkeypatch.setattr(binding, "tiers", lambda: tiers)
    monkeypatch.setattr(binding, "get_function", tiers.get_function)
    monkeypatch.setattr(gpu, "sm_count", lambda device: 1)  # no K slices: one launch on addresses
    monkeypatch.setattr(gpu, "device_scope", lambda device: contextlib.nullcontext())
    prepared.prepare_product.cache_clear()
    prepared.prepare_backward.cache_clear()
    yield recorded
    prepared.prepare_product.cache_clear()
    prepared.prepare_backward.cache_clear()


def test_bind_converts_the_plans_scalars_once(launches):
    plan = cuda.plan_forward(*SIGNATURE[:4], (), *SIGNATURE[4:], True, 1, False)
    product, resolve = binding.bind_tuned(plan, 0)
    assert (product.grid, product.block) == ((plan.product.grid,), (plan.product.block,))
    assert all(type(x) is binding._cintptr() for x in product.scalars)
    assert len(product.scalars) == len(plan.product.scalars)
    assert binding.bind(plan.product, 0).scalars is product.scalars  # converted once, then cached
    assert len(resolve.scalars) == len(product.scalars) + 1
    assert resolve.scalars[-1].dtype == "int32" and int(resolve.scalars[-1]) == plan.resolve.int32_scalars[0]


def test_prepared_product_runs_the_baseline_until_the_tuned_kernels_are_servable(launches):
    product = cuda.prepare_product(*SIGNATURE, True, 0)
    product.launch(1000, 2000, 3000, 4000, Stream)
    binding.tiers().compiling = False
    product.launch(1000, 2000, 3000, None, Stream)
    names = [entry[0] for entry in launches]
    assert names == ["counted", "baseline", "square", "argmax_resolve"]
    for _, grid, block, args, stream in launches[1:]:
        assert stream is Stream and len(grid) == len(block) == 1
        assert all(type(x) is binding._cintptr() for x in args[:4])  # the addresses, kernel-ready
    assert len(launches[2][3]) == 4 + len(product.plan.product.scalars)


def test_prepared_backward_zeroes_both_gradients_on_the_stream_then_scatters(launches, monkeypatch):
    memsets: list = []
    monkeypatch.setattr(cupy.cuda.runtime, "memsetAsync", lambda *args: memsets.append(args))
    backward = cuda.prepare_backward(*SIGNATURE, 0)
    backward.launch(1, 2, 3, 4, 5, 6, Stream)
    assert memsets == [(5, 0, 256 * 512 * 4, Stream.ptr), (6, 0, 512 * 300 * 4, Stream.ptr)]
    [(op, grid, block, args, stream)] = launches
    assert op == "backward" and stream is Stream and block == (256,)
    assert len(args) == 28 and all(type(x) is binding._cintptr() for x in args)
