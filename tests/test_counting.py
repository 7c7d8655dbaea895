"""The counting tropical semirings on the CPU: matmul and einsum on (values, counts) pairs, against a naive reference.

Values are small integers in float (so ties are many), seasoned with the
zero, the other infinity and NaN; counts are small and non-negative.  The
CUDA kernel's launch plan is checked here too, by running its indexing in
numpy (``emulated_count_forward``); tests/test_counting_gpu.py runs the kernel.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import zlib
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tropical_gemm as tg
from counting_reference import INT64_MAX, reference_counting_einsum, reference_counting_matmul, zero
from tropical_gemm.engines.cuda.counting import plan_count
from script_modules import load_script
from tropical_gemm.jit import catalogue, compile_spec, kernel_source, make_spec
from tropical_gemm.semirings import COUNT_DTYPE, register_semiring

SEMIRINGS = tg.counting_semirings()
DTYPES = ("float32", "float64")


def random_pair(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, semiring: str,
                specials: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Small integer values (many ties) and counts 0..4; with ``specials``, the zero, the other infinity and NaN."""
    values = rng.integers(-2, 3, shape).astype(dtype)
    if specials:
        draw = rng.random(shape)
        values[draw < 0.15] = zero(semiring)
        values[(draw >= 0.15) & (draw < 0.2)] = -zero(semiring)
        values[(draw >= 0.2) & (draw < 0.23)] = np.nan
    return values, rng.integers(0, 5, shape).astype(np.int64)


def assert_matches(got: tuple, want: tuple) -> None:
    values, counts = got
    want_values, want_counts = want
    assert values.dtype == want_values.dtype and counts.dtype == COUNT_DTYPE
    assert values.shape == want_values.shape == counts.shape
    np.testing.assert_array_equal(values, want_values)
    assert not np.signbit(values[values == 0]).any()  # a zero result is +0.0
    assert counts.tolist() == np.asarray(want_counts, dtype=object).tolist()


# ------------------------------------------------------------------ catalogue


def test_the_catalogue_names_and_spells_them():
    assert tg.counting_semirings() == ("count_max_plus", "count_min_plus")
    assert tg.get_counting_semiring("Counting-Tropical").name == "count_max_plus"
    sr = tg.get_counting_semiring("count_min_plus")
    assert (sr.base, sr.values.add) == ("min_plus", "min")
    assert sr.zero("float64") == (np.inf, 0) and sr.one("float32") == (0.0, 1)
    assert "count_max_plus" not in tg.semirings()  # the plain catalogue is for array operands
    with pytest.raises(ValueError, match="not a counting semiring; valid ones are count_max_plus"):
        tg.get_counting_semiring("max_plus")
    with pytest.raises(ValueError, match="is a counting semiring: pass each operand as a pair"):
        tg.get_semiring("count_max_plus")
    with pytest.raises(ValueError, match="the name 'Counting_Min_Plus' is taken by 'count_min_plus'"):
        register_semiring("Counting_Min_Plus", "min", "times", "a clash")


def test_kernel_specs_come_from_the_catalogue():
    spec = make_spec("count_forward", "counting_tropical", "float32")
    assert spec.name == "tg_count_forward_count_max_plus_f32"
    assert make_spec("count_forward", "count_max_plus", "float32", tile="skinny") == spec  # no tile of its own
    counted = catalogue(ops=["count_forward"])
    assert [s.name for s in counted] == [f"tg_count_forward_{sr}_{d}" for sr in SEMIRINGS for d in ("f32", "f64")]
    assert catalogue(semirings_=["count_min_plus"], dtypes=["float64"]) == [
        make_spec("count_forward", "count_min_plus", "float64")]
    assert not [s for s in catalogue(semirings_=["max_plus"]) if s.op == "count_forward"]
    assert set(catalogue(ops=["count_forward"])) <= set(catalogue())
    with pytest.raises(ValueError, match="unknown dtype 'int32'"):
        make_spec("count_forward", "count_max_plus", "int32")
    with pytest.raises(ValueError, match="not a counting semiring"):
        make_spec("count_forward", "max_plus", "float32")
    source = kernel_source(spec)
    assert 'extern "C" __global__ void __launch_bounds__(256) tg_count_forward_count_max_plus_f32(' in source
    assert "typedef tg::MaxPlus SR;" in source


def test_info_and_warmup_serve_them(cache_root):
    from tropical_gemm.info import collect, format_report
    from tropical_gemm.jit import warmup

    report = collect()
    assert report["semirings"] == {"arrays": list(tg.semirings()), "counting": list(SEMIRINGS)}
    assert "  counting (values, counts) pairs: count_max_plus, count_min_plus" in format_report(report)
    warmed = warmup(semirings="count_max_plus", dtypes="float64", ops="count_forward", arch="sm_90")
    assert [s.name for s in warmed] == ["tg_count_forward_count_max_plus_f64"] and warmed.stored == 1


def test_every_counting_kernel_compiles_for_sm_90(cache_root):
    for spec in catalogue(ops=["count_forward"]):
        outcome = compile_spec(spec, "sm_90")
        assert outcome.compiled and outcome.binary


# ------------------------------------------------------------------ matmul


SHAPES = [((1, 1), (1, 1)), ((1, 7), (7, 1)), ((5, 9), (9, 3)), ((17, 33), (33, 18)), ((4, 0), (0, 6)),
          ((0, 3), (3, 2)), ((3, 2), (2, 0)), ((2, 3, 5, 4), (4, 6)), ((2, 1, 3, 4), (5, 4, 2)), ((1, 3, 2), (4, 2, 5))]


@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_matmul_matches_the_reference(semiring, dtype, shapes):
    rng = np.random.default_rng(zlib.crc32(repr((semiring, dtype, shapes)).encode()))
    a, b = (random_pair(rng, s, dtype, semiring) for s in shapes)
    got = tg.matmul(a, b, semiring)
    assert_matches(got, reference_counting_matmul(a, b, semiring))
    np.testing.assert_array_equal(got[0], tg.matmul(a[0], b[0], tg.get_counting_semiring(semiring).base))


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_strided_and_transposed_operands_and_other_count_dtypes(semiring):
    rng = np.random.default_rng(3)
    av, ac = random_pair(rng, (9, 6), "float64", semiring)
    bv, bc = random_pair(rng, (11, 6), "float64", semiring)
    want = reference_counting_matmul((av, ac), (bv.T.copy(), bc.T.copy()), semiring)
    # values transposed, counts a transposed copy of another layout, int32 and uint8 counts
    assert_matches(tg.matmul((av, ac.astype(np.int32)), (bv.T, np.asfortranarray(bc.T).astype(np.uint8)), semiring),
                   want)
    wide_v, wide_c = np.zeros((9, 12)), np.zeros((9, 12), dtype=np.int64)
    wide_v[:, ::2], wide_c[:, ::2] = av, ac
    assert_matches(tg.matmul((wide_v[:, ::2], wide_c[:, ::2]), (bv.T, bc.T), semiring), want)


def test_vectors_are_promoted_as_by_numpy_matmul():
    rng = np.random.default_rng(4)
    a, b = random_pair(rng, (5,), "float32", "count_max_plus"), random_pair(rng, (5, 3), "float32", "count_max_plus")
    values, counts = tg.matmul(a, b, "count_max_plus")
    want = reference_counting_matmul((a[0][None], a[1][None]), b, "count_max_plus")
    assert values.shape == counts.shape == (3,)
    assert_matches((values[None], counts[None]), want)
    values, counts = tg.matmul(a, a, "count_max_plus")  # a dot product
    assert values.shape == counts.shape == ()


def test_counts_are_exact_up_to_int64_and_overflow_raises():
    big = 2**62
    # a sum that reaches 2**63 - 1 exactly is kept
    v, c = tg.matmul((np.zeros((1, 2)), np.array([[big, big - 1]])), (np.zeros((2, 1)), np.ones((2, 1), np.int64)),
                     "count_max_plus")
    assert int(c[0, 0]) == INT64_MAX
    with pytest.raises(OverflowError, match=r"larger than int64 holds \(2\*\*63 - 1\)"):  # a sum past it
        tg.matmul((np.zeros((1, 2)), np.array([[big, big]])), (np.zeros((2, 1)), np.ones((2, 1), np.int64)),
                  "count_max_plus")
    with pytest.raises(OverflowError):  # a product past it
        tg.matmul((np.zeros((1, 2)), np.array([[2**32, 1]])), (np.zeros((2, 1)), np.array([[2**31], [1]])),
                  "count_min_plus")
    v, c = tg.matmul((np.zeros((1, 1)), np.array([[2**32]])), (np.zeros((1, 1)), np.array([[2**31 - 1]])),
                     "count_min_plus")
    assert int(c[0, 0]) == 2**32 * (2**31 - 1)
    # an overflowed count whose value loses, or whose value is the zero, is no overflow
    v, c = tg.matmul((np.array([[0.0, -1.0]]), np.array([[3, big]])), (np.zeros((2, 1)), np.array([[5], [4]])),
                     "count_max_plus")
    assert (v[0, 0], int(c[0, 0])) == (0.0, 15)
    v, c = tg.matmul((np.array([[-np.inf]]), np.array([[big]])), (np.zeros((1, 1)), np.array([[4]])),
                     "count_max_plus")
    assert (v[0, 0], int(c[0, 0])) == (-np.inf, 0)


def test_negative_counts_are_refused():
    with pytest.raises(ValueError, match="a count is negative"):
        tg.matmul((np.zeros((2, 2)), np.array([[1, 1], [1, -1]])), (np.zeros((2, 2)), np.ones((2, 2), np.int64)),
                  "count_max_plus")


@pytest.mark.parametrize("call, error, match", [
    (lambda a: tg.matmul(a[0], a, "count_max_plus"), TypeError, "operand a of a counting semiring must be a tuple"),
    (lambda a: tg.matmul(a, (a[0],), "count_max_plus"), TypeError, "got a tuple of 1"),
    (lambda a: tg.matmul(a, a, "max_plus"), TypeError, r"pairs are the operands of the counting semirings"),
    (lambda a: tg.matmul(a[0], a[0], "count_max_plus"), ValueError, "pass each operand as a pair"),
    (lambda a: tg.matmul(a, a, "count_max_plus", argmax=True), ValueError, "argmax=True is not defined"),
    (lambda a: tg.matmul(a, a, "count_max_plus", out=a), TypeError, "out is not supported"),
    (lambda a: tg.matmul((a[0], a[1][:2]), a, "count_max_plus"), ValueError, "the counts have shape"),
    (lambda a: tg.matmul((a[0], a[1] * 1.0), a, "count_max_plus"), TypeError, "counts must be integers"),
    (lambda a: tg.matmul((a[0], a[1].astype(np.uint64)), a, "count_max_plus"), TypeError, "fit int64"),
    (lambda a: tg.matmul((a[0].astype(np.int32), a[1]), (a[0].astype(np.int32), a[1]), "count_max_plus"),
     TypeError, "must be float32 or float64"),
    (lambda a: tg.matmul((a[0].astype(np.float32), a[1]), a, "count_max_plus"), TypeError, "different dtypes"),
    (lambda a: tg.matmul((a[0].astype(">f8"), a[1]), (a[0].astype(">f8"), a[1]), "count_max_plus"), TypeError,
     r"big-endian, not this machine's byte order; convert it"),
    (lambda a: tg.einsum("ij,jk->ik", (a[0].astype(">f4"), a[1]), (a[0].astype(">f4"), a[1]),
                         semiring="count_min_plus"), TypeError, r">f4: it is big-endian"),
    (lambda a: tg.matmul(a, a, "count_max_mul"), ValueError, "unknown semiring"),
    (lambda a: tg.einsum("ij,jk->ik", a, a), TypeError, "pairs are the operands of the counting semirings"),
    (lambda a: tg.matmul(((1.0, 2.0),), ((1.0,), (2.0,))), TypeError,  # numpy's array-like, a pair here
     r"a tuple operand is read as such a pair: pass nested tuples as np.asarray\(x\)"),
    (lambda a: tg.einsum("ij,jk->", a, a, semiring="count_max_plus", return_configuration=True), ValueError,
     "return_configuration=True is not defined"),
    (lambda a: tg.einsum("ij,jk->ik", a, a[0], semiring="count_max_plus"), TypeError, "must be a tuple"),
    (lambda a: tg.einsum("ij,jk->ik", (a[0].astype(np.float32), a[1]), a, semiring="count_max_plus"), TypeError,
     r"the values have different dtypes \(float32 and float64\)"),  # was numba's "No matching definition"
    (lambda a: tg.einsum(a, [0, 1], (a[0].astype(np.float32), a[1]), [1, 2], semiring="count_max_plus"), TypeError,
     r"the values have different dtypes \(float64 and float32\)"),
    (lambda a: tg.matmul((np.ma.masked_array(a[0]), a[1]), a, "count_max_plus"), TypeError, "masked array"),
    (lambda a: tg.einsum("ij->", (a[0], np.ma.masked_array(a[1])), semiring="count_max_plus"), TypeError,
     "take numpy or cupy arrays"),
])
def test_bad_input_is_named(call, error, match):
    a = (np.zeros((3, 3)), np.ones((3, 3), dtype=np.int64))
    with pytest.raises(error, match=match):
        call(a)


# ------------------------------------------------------------------ einsum


EINSUMS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("ij,jk,kl->", [(2, 3), (3, 4), (4, 2)]),
    ("ij->i", [(4, 5)]),
    ("ij->", [(4, 5)]),
    ("ii->i", [(4, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 3)]),
    ("ijk,jkl->il", [(2, 3, 2), (3, 2, 4)]),
    ("i,i,i->", [(6,), (6,), (6,)]),
    ("ij,ji->ij", [(3, 4), (4, 3)]),
    ("ij,jk->ik", [(3, 0), (0, 2)]),
]


@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("subscripts, shapes", EINSUMS, ids=[e for e, _ in EINSUMS])
def test_einsum_matches_every_assignment(semiring, subscripts, shapes):
    rng = np.random.default_rng(zlib.crc32(repr((semiring, subscripts)).encode()))
    pairs = []
    for shape in shapes:  # the zero only: an infinity of the other sign makes sums depend on the order
        values, counts = random_pair(rng, shape, "float64", semiring, specials=False)
        values[rng.random(shape) < 0.15] = zero(semiring)
        pairs.append((values, counts))
    want = reference_counting_einsum(subscripts, pairs, semiring)
    assert_matches(tg.einsum(subscripts, *pairs, semiring=semiring), want)
    for optimize in ("greedy", "optimal"):
        assert_matches(tg.einsum(subscripts, *pairs, semiring=semiring, optimize=optimize), want)


def test_einsum_takes_the_interleaved_form_broadcasting_and_strided_pairs():
    rng = np.random.default_rng(5)
    a = random_pair(rng, (3, 4), "float32", "count_max_plus", specials=False)
    b = random_pair(rng, (5, 4), "float32", "count_max_plus", specials=False)
    want = reference_counting_einsum("ij,jk->ik", [a, (b[0].T.copy(), b[1].T.copy())], "count_max_plus")
    assert_matches(tg.einsum(a, ("i", "j"), (b[0].T, b[1].T), ["j", "k"], ["i", "k"], semiring="count_max_plus"),
                   want)
    batched = (np.stack([a[0]] * 2), np.stack([a[1]] * 2))
    values, counts = tg.einsum("...ij,jk->...ik", batched, (b[0].T, b[1].T), semiring="count_max_plus")
    assert_matches((values[1], counts[1]), want)


def test_einsum_overflow_raises_after_the_last_step():
    chain = [(np.zeros((2, 2)), np.full((2, 2), 2**16, dtype=np.int64)) for _ in range(4)]
    with pytest.raises(OverflowError):  # 2 · (2**16)**4 = 2**65 ways
        tg.einsum("ab,bc,cd,de->", *chain, semiring="count_max_plus")
    values, counts = tg.einsum("ab,bc,cd->", *chain[:3], semiring="count_max_plus")
    assert (float(values), int(counts)) == (0.0, 2**4 * 2**48)


# ------------------------------------------------------------------ the CUDA launch plan, emulated


def emulated_count_forward(launch, flats: list[np.ndarray], starts: list[int], semiring: str) -> tuple:
    """What ``count_forward.cu`` computes from ``launch``'s scalars, reading each operand at its start in ``flats``."""
    m, n, k, va_sm, va_sk, ca_sm, ca_sk, vb_sk, vb_sn, cb_sk, cb_sn, batches, d1, d2, *strides = launch.scalars
    va0, va1, va2, ca0, ca1, ca2, vb0, vb1, vb2, cb0, cb1, cb2 = strides
    fva, fca, fvb, fcb = flats
    sva, sca, svb, scb = starts
    values = np.empty((batches, m, n), fva.dtype)
    counts = np.empty((batches, m, n), dtype=object)
    from counting_reference import _entry

    for batch in range(batches):
        i2, rest = batch % d2, batch // d2
        i1, i0 = rest % d1, rest // d1
        ova, ovb = i0 * va0 + i1 * va1 + i2 * va2, i0 * vb0 + i1 * vb1 + i2 * vb2
        oca, ocb = i0 * ca0 + i1 * ca1 + i2 * ca2, i0 * cb0 + i1 * cb1 + i2 * cb2
        for i in range(m):
            for j in range(n):
                ks = np.arange(k)
                values[batch, i, j], counts[batch, i, j] = _entry(
                    semiring, fva[sva + ova + i * va_sm + ks * va_sk], fca[sca + oca + i * ca_sm + ks * ca_sk],
                    fvb[svb + ovb + ks * vb_sk + j * vb_sn], fcb[scb + ocb + ks * cb_sk + j * cb_sn], fva.dtype)
    return values, counts


def strided_view(flat: np.ndarray, start: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(flat[start:], shape, tuple(s * flat.itemsize for s in strides))


PLANS = [  # each operand: (shape, element strides, start) in its own flat buffer
    [((3, 4), (4, 1), 0), ((3, 4), (1, 3), 2), ((4, 5), (5, 1), 1), ((4, 5), (1, 4), 0)],       # transposed counts
    [((2, 3, 4), (12, 4, 1), 0), ((2, 3, 4), (1, 2, 6), 3), ((4, 5), (1, 4), 0), ((4, 5), (5, 1), 0)],
    [((1, 3, 4), (12, 4, 1), 0), ((1, 3, 4), (0, 4, 1), 5), ((2, 4, 2), (8, 2, 1), 0), ((2, 4, 2), (1, 2, 8), 0)],
    [((2, 2, 2, 3, 2), (48, 6, 24, 2, 1), 1), ((2, 2, 2, 3, 2), (24, 12, 6, 2, 1), 0),            # unfoldable batch
     ((2, 2, 2, 2, 3), (24, 12, 6, 3, 1), 0), ((2, 2, 2, 2, 3), (12, 0, 6, 3, 1), 2)],
]


@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("operands", PLANS, ids=range(len(PLANS)))
def test_the_cuda_launch_plan_indexes_every_operand_by_its_own_strides(semiring, operands):
    rng = np.random.default_rng(6)
    flats, views = [], []
    for i, (shape, strides, start) in enumerate(operands):
        span = start + 1 + sum((s - 1) * abs(st) for s, st in zip(shape, strides))
        flat = (rng.integers(-2, 3, span).astype(np.float32) if i % 2 == 0 else rng.integers(0, 5, span))
        flats.append(flat)
        views.append(strided_view(flat, start, shape, strides))
    batch = np.broadcast_shapes(views[0].shape[:-2], views[2].shape[:-2])
    launch = plan_count(tuple(v.shape for v in views), tuple(st for _, st, _ in operands), batch, "float32",
                        semiring)
    assert launch.spec == make_spec("count_forward", semiring, "float32")
    assert launch.grid == (1, 1, max(1, math.prod(batch)))
    got = emulated_count_forward(launch, flats, [start for *_, start in operands], semiring)
    want = tg.matmul((views[0], views[1]), (views[2], views[3]), semiring)
    out_shape = (math.prod(batch), *want[0].shape[-2:])
    np.testing.assert_array_equal(got[0], want[0].reshape(out_shape))
    assert got[1].tolist() == want[1].reshape(out_shape).tolist()


def test_the_launch_grid_loops_past_its_limits():
    launch = plan_count(((3, 2**21, 1), (3, 2**21, 1), (3, 1, 70000), (3, 1, 70000)),
                        ((2**21, 1, 1), (2**21, 1, 1), (70000, 70000, 1), (70000, 70000, 1)), (3,), "float64",
                        "count_min_plus")
    assert launch.grid == (-(-70000 // 16), 65535, 3)
    launch = plan_count(((70000, 1, 1),) * 4, ((1, 1, 1),) * 4, (70000,), "float64", "count_min_plus")
    assert launch.grid == (1, 1, 65535)


# ------------------------------------------------------------------ examples/count_mis.py


@pytest.fixture(scope="module")
def count_mis():
    return load_script("examples", "count_mis")


@pytest.mark.parametrize("vertices, seed", [(10, 0), (14, 1), (18, 2), (20, 3)])
def test_count_mis_matches_brute_force_and_networkx(count_mis, vertices, seed):
    graph = nx.random_regular_graph(3, vertices, seed=seed)
    want = count_mis.brute_force_count(graph)
    assert count_mis.networkx_count(graph) == want
    assert count_mis.count_mis(graph, np)[1] == want


def test_the_counts_of_known_graphs(count_mis):
    assert count_mis.brute_force_count(nx.complete_graph(5)) == 5  # any one vertex
    assert count_mis.count_mis(nx.complete_graph(5), np) == (1, 5)
    assert count_mis.count_mis(nx.cycle_graph(6), np) == (3, 2)  # the even or the odd vertices
    assert count_mis.count_mis(nx.empty_graph(4), np) == (4, 1)
    assert count_mis.count_mis(nx.path_graph(5), np) == (3, 1)


def test_count_mis_runs_as_a_script_and_checks_itself():
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    for argv in ([], ["--vertices", "30"]):
        done = subprocess.run([sys.executable, str(root / "examples" / "count_mis.py"), *argv], capture_output=True,
                              text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "the size and the count match an independent count" in done.stdout


@settings(max_examples=25)
@given(semiring=st.sampled_from(SEMIRINGS), dtype=st.sampled_from(DTYPES),
       shapes=st.tuples(st.sampled_from([((), ()), ((2,), ()), ((1, 3), (2, 1))]), st.integers(1, 20),
                        st.integers(0, 20), st.integers(1, 20)),
       huge=st.sampled_from([0.0, 0.05, 0.3]), threads=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_products_on_every_split_match_the_reference(cpu_threads, semiring, dtype, shapes, huge, threads, seed):
    """Tiles of C over 1 to 4 threads, each reporting its own overflow; counts up to 2**62, which overflow
    where enough of them meet at the final value (an OverflowError then), and not where they lose."""
    (batch_a, batch_b), m, k, n = shapes
    rng = np.random.default_rng(seed)
    a, b = random_pair(rng, (*batch_a, m, k), dtype, semiring), random_pair(rng, (*batch_b, k, n), dtype, semiring)
    for _, counts in (a, b):
        counts[rng.random(counts.shape) < huge] = rng.integers(2**31, 2**62, dtype=np.int64)
    want = reference_counting_matmul(a, b, semiring)
    cpu_threads(threads)
    if any(count > INT64_MAX for count in want[1].flat):
        with pytest.raises(OverflowError):
            tg.matmul(a, b, semiring)
    else:
        assert_matches(tg.matmul(a, b, semiring), want)
