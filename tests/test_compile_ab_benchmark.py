"""benchmarks/compile_ab.py: another revision's programs from its own tropical_gemm, compiled by turns with this tree's."""

from __future__ import annotations

import json
import shutil

import pytest

from script_modules import ROOT, load_script

pytestmark = pytest.mark.nvrtc
needs_git = pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                               reason="needs git and a clone of the repository (it archives a revision)")


@needs_git
def test_head_against_itself_has_the_same_programs_compiled_alternately(tmp_path, monkeypatch):
    compile_ab = load_script("benchmarks", "compile_ab")
    monkeypatch.setattr(compile_ab, "isolate_caches", lambda: None)  # the test session's caches are private already
    assert compile_ab.main(["HEAD", "--only", "^tg_forward_max_plus_f32_rr_baseline$", "--pairs", "2",
                            "--out", str(tmp_path)]) == 0
    report = json.loads(next(tmp_path.glob("compile-ab-*.json")).read_text())
    (row,) = report["kernels"]
    assert row["name"] == "tg_forward_max_plus_f32_rr_baseline" and row["identical"]
    assert len(row["samples"]["rev"]) == len(row["samples"]["this"]) == 2 and row["ratio"] > 0
    assert report["only_in_one"] == [] and report["environment"]["nvrtc"]


@needs_git
def test_a_revision_git_does_not_know_is_a_clear_exit(tmp_path):
    compile_ab = load_script("benchmarks", "compile_ab")
    with pytest.raises(SystemExit, match="git archive no-such-revision failed"):
        compile_ab.programs_of("no-such-revision", "baseline")


def test_a_folder_holding_a_checkout_stands_for_a_revision():
    """Where the tree was copied without its history (the device), the other version is a folder of its files."""
    compile_ab = load_script("benchmarks", "compile_ab")
    theirs = compile_ab.programs_of(str(ROOT), "^tg_forward_max_plus_f32_rr_baseline$")
    assert theirs == compile_ab.programs("^tg_forward_max_plus_f32_rr_baseline$")
