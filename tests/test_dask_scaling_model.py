"""benchmarks/dask_scaling.py's graph placement and bookkeeping, and benchmarks/scale_model.py's model (no GPU)."""

from __future__ import annotations

import pytest

from script_modules import load_script

da = pytest.importorskip("dask.array")
import tropical_gemm.dask as tgd  # noqa: E402

scaling = load_script("benchmarks", "dask_scaling")  # which puts benchmarks/ on the path, as when it runs
import scale_model as model  # noqa: E402

R, W, MEMORY = 25e12, 2e9, 64e9


@pytest.mark.parametrize("k_blocks", [1, 2, 3, 4, 5, 8])
def test_every_task_is_placed_with_the_earlier_of_the_ranges_it_combines(k_blocks):
    """Partial k on worker k; a combine (and the result) where the first K block of its range is, so
    only the later range's partial C moves: k_blocks − 1 moves in all."""
    k = 4 * k_blocks
    c = tgd.matmul(da.ones((3, k), chunks=(3, 4)), da.ones((k, 2), chunks=(4, 2)))
    graph = c.__dask_graph__()
    dependencies = graph.get_all_dependencies()
    layer = {key for key in graph if str(key[0]).startswith(c.name)}
    partials = sorted(key for key in layer if str(key[0]).endswith("-partial"))
    assert [scaling.owner_of_k_range(key) for key in partials] == list(range(len(partials)))
    moves = 0
    for key in layer - set(partials):
        owners = sorted(scaling.owner_of_k_range(d) for d in dependencies[key] if d in layer)
        if owners:  # with one K block the result is the chunk product itself: it reads the inputs
            assert scaling.owner_of_k_range(key) == owners[0], key
            moves += len(owners) - 1
    assert moves == k_blocks - 1
    assert scaling.owner_of_k_range(c.__dask_keys__()[0][0]) == 0


def test_union_seconds_counts_overlapping_transfers_once():
    assert scaling.union_seconds([]) == 0
    assert scaling.union_seconds([(0.0, 1.0), (0.5, 2.0), (3.0, 3.5), (3.1, 3.2)]) == pytest.approx(2.5)


@pytest.mark.parametrize("gpus, counts", [(1, [1]), (2, [1, 2]), (3, [1, 2, 3]), (4, [1, 2, 4]), (6, [1, 2, 4, 6])])
def test_scaling_points_are_powers_of_two_and_every_gpu(gpus, counts):
    assert scaling.gpu_counts(gpus) == counts


@pytest.mark.parametrize("gpus, shape", [(1, (1, 1)), (2, (1, 2)), (7, (1, 7)), (8, (2, 4)), (64, (8, 8))])
def test_the_grid_is_the_most_square_factorisation(gpus, shape):
    assert model.grid(gpus) == shape


def test_one_gpu_moves_nothing_and_more_gpus_move_their_panels():
    inputs = model.Inputs(R, W, MEMORY)
    assert model.transfer_s(32768, 1, inputs) == 0
    # 8×8: each GPU receives 7/8 of an A panel and of a B panel, each N²/8 elements of 4 bytes
    assert model.transfer_s(65536, 64, inputs) == pytest.approx(2 * 4 * 65536**2 / 8 * 7 / 8 / W)
    assert model.compute_s(65536, 64, inputs) == pytest.approx(2 * 65536**3 / (64 * R))


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("gpus", [8, 64])
def test_the_largest_n_fits_the_budget_and_the_next_does_not(gpus, overlap):
    inputs = model.Inputs(R, W, 1e15)  # memory never binds here

    def total(n: int) -> float:
        c, t = model.compute_s(n, gpus, inputs), model.transfer_s(n, gpus, inputs)
        return max(c, t) if overlap else c + t

    answer = model.largest_n(gpus, inputs, 60.0, overlap)
    assert answer["bound"] == "time" and answer["n"] % 1024 == 0
    assert total(answer["n"]) <= 60.0 < total(answer["n"] + 1024)


def test_memory_caps_the_answer_where_it_binds_first():
    inputs = model.Inputs(R, W, 1e9)
    answer = model.largest_n(8, inputs, 60.0, overlap=True)
    assert answer["bound"] == "memory"
    assert 16 * answer["n"] ** 2 / 8 <= 1e9 < 16 * (answer["n"] + 1024) ** 2 / 8


def test_the_benchmark_feeds_the_model_from_its_report():
    report = {"environment": {"memory_bytes": 80e9},
              "scaling": {"strong": [{"tops": 25.0}]},
              "moving": {"gpus": 4, "m": 16384, "n": 16384, "k": 32768, "link_bytes_per_s": W, "seconds": 3.0}}
    fed = model.model_of_run(report, 0.8)
    assert fed["ops_per_gpu"] == R and fed["link_bytes_per_s"] == W and fed["memory_bytes"] == 0.8 * 80e9
    assert [(a["gpus"], a["overlap"]) for a in fed["answers"]] == [(8, False), (8, True), (64, False), (64, True)]
    compute = 2 * 16384 * 16384 * 32768 / (4 * R)
    assert fed["moving_check"]["predicted_s"] == pytest.approx(compute + 2 * 4 * 16384**2 / W)  # a 2-level tree
    one_gpu = model.model_of_run({**report, "moving": None}, 0.8)
    assert one_gpu["answers"] is None and "one GPU" in one_gpu["why"]
