"""benchmarks/sass_report.py's reading of a SASS listing (no cuobjdump needed: a fixed listing stands in)."""

from __future__ import annotations

import pytest
from script_modules import load_script

#: A grid loop (0x0000..0x00d0) around a slice loop (0x0010..0x00c0) around a k loop (0x0030..0x0080):
#: the k loop does 2 multiply-adds (FADD + FMNMX each) per trip, the slice loop's own body 1.
LISTING = """
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/                   LDG.E R2, [R4.64] ;
        /*0020*/                   STS [R6], R2 ;
        /*0030*/                   LDS.128 R8, [R7] ;
        /*0040*/                   FADD R10, R8, R9 ;
        /*0050*/                   FMNMX R11, R11, R10, !PT ;
        /*0060*/                   FADD R12, R8, R10 ;
        /*0070*/                   FMNMX R13, R13, R12, !PT ;
        /*0080*/               @P0 BRA 0x30 ;
        /*0090*/                   FADD R14, R8, R9 ;
        /*00a0*/                   FMNMX R15, R15, R14, !PT ;
        /*00b0*/                   ISETP.GE.AND P1, PT, R0, 0x10, PT ;
        /*00c0*/              @!P1 BRA 0x10 ;
        /*00d0*/                   BRA 0x0 ;
        /*00e0*/                   EXIT ;
"""


@pytest.fixture(scope="module")
def sass():
    return load_script("benchmarks", "sass_report")


def test_the_listing_parses_with_predicates_and_modifiers(sass):
    instructions = sass.parse(LISTING)
    assert len(instructions) == 15
    assert instructions[8][:2] == (0x80, "BRA") and instructions[3][1] == "LDS.128"
    assert [sass.classify(op) for op in ("FADD", "FMNMX", "LDS.128", "LDG.E", "STS", "ISETP.GE.AND", "S2R",
                                         "IMAD.MOV.U32", "BRA", "LOP3.LUT", "STL")] == [
        "useful", "useful", "shared load", "global load", "shared store", "compare/select", "move", "move",
        "control", "other", "local (spill)"]


def test_the_slice_is_its_loops_own_body_once_and_the_k_loop_as_often_as_the_work_needs(sass):
    instructions = sass.parse(LISTING)
    assert sorted(sass.loops(instructions)) == [(0, 13), (1, 12), (3, 8)]
    profile = sass.slice_profile(instructions, multiply_adds=5, fused=False)
    # 5 multiply-adds = 10 useful: 2 in the slice loop's own body, 4 per k-loop trip, so 2 trips
    assert profile["k_loop_trips_per_slice"] == 2 and profile["k_loop_instructions"] == 6
    assert profile["per_slice"] == {"useful": 10, "shared load": 2, "control": 3, "global load": 1,
                                    "shared store": 1, "compare/select": 1}
    assert profile["useful_share"] == pytest.approx(10 / 18)
    assert profile["instructions_per_multiply_add"] == pytest.approx(18 / 5)


def test_occupancy_follows_the_registers(sass):
    assert sass.occupancy(128, 256) == {"blocks_per_sm": 2, "warps_per_sm": 16}
    assert sass.occupancy(255, 256) == {"blocks_per_sm": 1, "warps_per_sm": 8}
    assert sass.occupancy(32, 64) == {"blocks_per_sm": 32, "warps_per_sm": 64}
