"""Both engines offer the interface the public API calls (``engines.protocol.Engine``), parameter names included."""

from __future__ import annotations

import inspect

import pytest

from tropical_gemm.engines import cpu, cuda
from tropical_gemm.engines.protocol import Engine

ENGINES = [cpu, cuda]
METHODS = ["as_array", "empty", "is_c_contiguous", "may_share_memory", "forward", "backward", "count_forward"]


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.NAME)
def test_engine_modules_are_engines(engine):
    assert isinstance(engine, Engine)
    assert engine.NAME in ("cpu", "cuda")


def test_the_protocol_lists_what_the_test_checks():
    declared = {name for name, value in vars(Engine).items() if inspect.isfunction(value) and name[0] != "_"}
    assert declared == set(METHODS)
    assert list(Engine.__annotations__) == ["NAME"]


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.NAME)
@pytest.mark.parametrize("method", METHODS)
def test_engine_functions_take_the_protocols_parameters(engine, method):
    """Callers pass arguments by position and by name, so the names must match, not only the count."""
    expected = list(inspect.signature(getattr(Engine, method)).parameters)[1:]  # without self
    assert list(inspect.signature(getattr(engine, method)).parameters) == expected


def test_a_module_missing_a_function_is_not_an_engine():
    class Partial:
        NAME = "partial"
        as_array = empty = is_c_contiguous = may_share_memory = forward = count_forward = staticmethod(
            lambda *a: None)

    assert not isinstance(Partial(), Engine)  # no backward
