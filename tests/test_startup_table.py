"""benchmarks/startup.py's table from a report (no GPU: a fixed report stands in for the children's)."""

from __future__ import annotations

from script_modules import load_script


def _run(first: float, on_host: float, steady: float) -> dict:
    return {"first_result_s": first, "on_host_s": on_host, "import_s": 0.005, "steady_call_s": steady,
            "compiled_in_call": 1, "cupy_compiles": 0}


def test_the_table_shows_the_warm_medians_on_the_gpu_and_on_the_host():
    startup = load_script("benchmarks", "startup")
    report = {"environment": {"device": "a GPU"},
              "stories": [{"story": "cupy i32 max_plus 4096³", "cold_tiered": _run(0.3, 0.33, 0.006),
                           "cold_untiered": _run(0.8, 0.83, 0.006),
                           "warm": [_run(0.031, 0.055, 0.0053), _run(0.029, 0.052, 0.0054),
                                    _run(0.040, 0.060, 0.0055)]}]}
    header, columns, rule, row = startup.table(report)[:4]
    assert "a GPU" in header
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == len(columns.strip("|").split("|")) == len(rule.strip("|").split("|"))
    named = dict(zip((c.strip() for c in columns.strip("|").split("|")), cells))
    assert named["warm (median)"] == "31.0 ms"
    assert named["warm, on the host"] == "55.0 ms"
    assert named["cold, tiered"] == "0.300 s"
    assert named["per call warm"] == "5.40 ms"


def _process(status: int, stderr: str, first: float, tier: str, compiled: int, on_disk: int) -> dict:
    row = {"status": status, "stderr": stderr, "on_disk": on_disk, "clean": status == 0 and not stderr}
    if status == 0:
        row.update(first_result_s=first, first_tier=tier, compiled=compiled, baseline_launches=int(tier == "baseline"))
    return row


def test_the_lifecycle_summary_counts_abnormal_exits_and_second_run_compiles():
    lifecycle = load_script("benchmarks", "lifecycle")
    pairs = [{"first": _process(0, "", 0.2, "baseline", 1, 2), "second": _process(0, "", 0.03, "tuned", 0, 2)},
             {"first": _process(-11, "Segmentation fault", 0, "", 0, 1),
              "second": _process(0, "", 0.05, "baseline", 1, 2)}]
    row = lifecycle.summary("cupy f32 max_plus 1024³", pairs)
    assert (row["processes"], row["abnormal"], row["signals"]) == (4, 1, 1)
    assert (row["second_compiles"], row["second_baseline_launches"]) == (1, 1)
    assert row["second_s"] == 0.04 and row["first_tiers"] == ["?", "baseline"]
    lines = lifecycle.table({"environment": {"device": "a GPU", "commit": "abcdef0"}, "repeats": 2, "jobs": 1,
                             "stories": [row]})
    assert lines[-1] == "4 processes, 1 abnormal exits"
    assert "| 1 (1 by a signal) |" in lines[3]
