"""Binding and prepared launches without a GPU: a recording stand-in takes the place of each loaded kernel.

The GPU suite runs these paths for real; here the arguments each launch
would pass to the driver are checked on any machine: the grid and block of
each Plan, the scalars bound once per kernel and signature (the resolve's
slice depth an int32), the baseline until the tuned kernel is servable, and
the prepared backward's memsets on the caller's stream.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from jit_helpers import RecordingTiers
from tropical_gemm.engines import cuda
from tropical_gemm.engines.cuda import binding, gpu, prepared
from tropical_gemm.jit import driver

SIGNATURE = ((256, 512), (512, 1), (512, 300), (300, 1), "float32", "max_plus")


STREAM = 1234  # a raw stream handle


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list:
    recorded: list = []
    tiers = RecordingTiers(recorded)
    monkeypatch.setattr(binding, "tiers", lambda: tiers)
    monkeypatch.setattr(binding, "get_function", tiers.get_function)
    monkeypatch.setattr(gpu, "sm_count", lambda device: 1)  # no K slices: one launch on addresses
    monkeypatch.setattr(gpu, "shared_limit", lambda device: 227 * 1024)  # an sm_90's
    caches = (prepared.prepare_product, prepared.prepare_backward, binding._bound)
    for cache in caches:
        cache.cache_clear()
    yield recorded
    for cache in caches:
        cache.cache_clear()


def test_bind_packs_the_plans_scalars_once(launches):
    plan = cuda.plan_forward(*SIGNATURE[:4], (), *SIGNATURE[4:], True, 1, False)
    product, resolve = binding.bind_tuned(plan, 0)
    assert (product.grid, product.block) == ((plan.product.grid,), (plan.product.block,))
    assert product.scalars == plan.product.scalars and all(type(x) is int for x in product.scalars)
    assert binding.bind(plan.product, 0) is product  # bound once per kernel and signature, then cached
    assert len(resolve.scalars) == len(product.scalars) + 1
    assert resolve.scalars[-1].dtype == "int32" and int(resolve.scalars[-1]) == plan.resolve.int32_scalars[0]


def test_prepared_product_runs_the_baseline_until_the_tuned_kernels_are_servable(launches):
    product = cuda.prepare_product(*SIGNATURE, True, 0)
    product.launch(1000, 2000, 3000, 4000, STREAM)
    binding.tiers().compiling = False
    product.launch(1000, 2000, 3000, None, STREAM)
    names = [entry[0] for entry in launches]
    assert names == ["counted", "baseline", "square", "argmax_resolve"]
    assert launches[1][3][:4] == (1000, 2000, 3000, 4000) and launches[2][3][:4] == (1000, 2000, 3000, 0)
    for _, grid, block, args, stream in launches[1:]:
        assert stream == STREAM and len(grid) == len(block) == 1
    assert len(launches[2][3]) == 4 + len(product.plan.product.scalars)


def test_prepared_backward_zeroes_both_gradients_on_the_stream_then_scatters(launches, monkeypatch):
    memsets: list = []
    monkeypatch.setattr(driver, "memset_async", lambda *args: memsets.append(args))
    monkeypatch.setattr(driver, "primary_context", lambda device: 0)
    monkeypatch.setattr(driver, "on_context", lambda context: contextlib.nullcontext())
    backward = cuda.prepare_backward(*SIGNATURE, 0)
    backward.launch(1, 2, 3, 4, 5, 6, STREAM)
    assert memsets == [(5, 256 * 512 * 4, STREAM), (6, 512 * 300 * 4, STREAM)]
    [(op, grid, block, args, stream)] = launches
    assert op == "backward" and stream == STREAM and block == (256,)
    assert len(args) == 28 and args[:6] == (1, 2, 3, 4, 5, 6) and all(type(x) is int for x in args)
