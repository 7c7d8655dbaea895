"""Kernel specs and their sources, as the compile/cache layer relies on them (no compiles here)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tropical_gemm.jit import OPS, KernelSpec, catalogue, kernel_source, make_spec


def test_names_are_unique_c_identifiers():
    specs = catalogue()
    names = [s.name for s in specs]
    assert len(set(names)) == len(names) == len(set(specs))
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n) for n in names)


def test_names_are_stable_and_readable():
    # Names appear in cache file names and logs; a rename silently orphans every cached kernel.
    assert make_spec("forward", "max_plus", "float32").name == "tg_forward_max_plus_f32_rr_square"
    assert make_spec("forward_argmax", "min_plus", "int64", a_layout="col", tile="skinny").name == \
        "tg_forward_argmax_min_plus_i64_cr_skinny"
    assert make_spec("backward", "max_plus", "float64").name == "tg_backward_max_plus_f64"
    assert make_spec("backward_ordered_b", "max_plus", "float64").name == "tg_backward_ordered_b_max_plus_f64"


def test_specs_are_frozen_and_hashable():
    spec = make_spec("forward", "max_plus", "float32")
    with pytest.raises(AttributeError):
        spec.dtype = "float64"  # type: ignore[misc]
    assert {spec: 1}[make_spec("forward", "max_plus", "float32")] == 1


def test_catalogue_filters_compose():
    specs = catalogue(semirings_=["max_plus"], dtypes=["float32", "int32"], ops=["backward", "backward_ordered_a"])
    assert specs == [make_spec(op, "max_plus", "float32") for op in ("backward", "backward_ordered_a")]
    with pytest.raises(ValueError, match="unknown op"):
        catalogue(ops=["sideways"])


@pytest.mark.parametrize("op", OPS)
def test_every_source_defines_its_extern_c_entry_point(op):
    # The registry loads cached cubins by this name without recompiling, so it must be unmangled.
    for spec in catalogue(ops=[op], dtypes=["float32"]):
        source = kernel_source(spec)
        assert re.search(r'extern "C" __global__ void(?: __launch_bounds__\([^)]*\))? ' + spec.name + r"\(", source), \
            spec.name


def test_importing_jit_does_not_import_cupy():
    code = "import sys, tropical_gemm.jit; print('cupy' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_spec_equality_ignores_nothing_that_changes_code():
    a = make_spec("forward", "max_plus", "float32", a_layout="col")
    b = make_spec("forward", "max_plus", "float32", a_layout="row")
    assert a != b and a.name != b.name and kernel_source(a) != kernel_source(b)
    assert isinstance(a, KernelSpec)
