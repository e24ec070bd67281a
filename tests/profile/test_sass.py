"""The SASS mix finds the main loop and counts tensor-core, FFMA and local-memory instructions."""
from __future__ import annotations

import pytest

from aotc.profile import sass

LISTING = """
//--------------------- .text.k               --------------------------
\t.section\t.text.k,"ax",@progbits
k:
        /*0000*/                   S2R R0, SR_TID.X ;
.L_x_0:
        /*0010*/                   LDG.E R2, desc[UR6][R2.64] ;
.L_x_1:
        /*0020*/                   HMMA.16816.F32 R4, R8, R10, R4 ;
        /*0030*/                   HMMA.16816.F32 R4, R8, R10, R4 ;
        /*0040*/                   FFMA R1, R2, R3, R1 ;
        /*0050*/              @!P0 BRA `(.L_x_1) ;
        /*0060*/                   STL [R1], R2 ;
        /*0070*/               @P1 BRA `(.L_x_0) ;
        /*0080*/                   LDL R2, [R1] ;
        /*0090*/                   EXIT ;
"""


def test_the_innermost_backward_loop_is_the_main_loop():
    k = sass.parse(LISTING)["k"]
    assert sass.main_loop(k) == (0x20, 0x50)
    m = sass.mix(k)
    assert m["loop_instructions"] == 4
    assert m["tensor_share"] == 0.5 and m["ffma_share"] == 0.25
    assert m["fp_other_share"] == 0.0
    assert m["local_ops"] == 2


def test_one_flop_float_instructions_have_their_own_share():
    pool = LISTING.replace("HMMA.16816.F32 R4, R8, R10, R4", "FMNMX R4, R8, R10, !PT").replace(
        "FFMA R1, R2, R3, R1", "HADD2 R1, R2, R3")
    m = sass.mix(sass.parse(pool)["k"])
    assert m["tensor_share"] == 0.0 and m["ffma_share"] == 0.0 and m["fp_other_share"] == 0.75


def test_a_longer_loop_without_mma_is_not_a_tensor_core_kernels_main_loop():
    epilogue = "".join(f"        /*{a:04x}*/                   FMUL R1, R2, R3 ;\n" for a in range(0xa0, 0x100, 0x10))
    listing = LISTING.replace("        /*0090*/                   EXIT ;\n",
                              ".L_x_2:\n" + epilogue + "        /*0100*/              @!P2 BRA `(.L_x_2) ;\n"
                              "        /*0110*/                   EXIT ;\n")
    k = sass.parse(listing)["k"]
    assert sass.main_loop(k) == (0x20, 0x50)
    plain = sass.parse(listing.replace("HMMA.16816.F32", "FFMA"))["k"]
    assert sass.main_loop(plain) == (0xa0, 0x100)       # no mma anywhere: the longest innermost loop


def test_mma_outside_every_innermost_loop_is_straight_line_math():
    """A K loop unrolled away leaves the mma in line: the epilogue loop after it is not the main loop."""
    listing = LISTING.replace("BRA `(.L_x_1)", "NOP").replace("BRA `(.L_x_0)", "NOP").replace(
        "        /*0090*/                   EXIT ;\n",
        ".L_x_2:\n        /*0090*/                   FMUL R1, R2, R3 ;\n"
        "        /*00a0*/              @!P2 BRA `(.L_x_2) ;\n        /*00b0*/                   EXIT ;\n")
    k = sass.parse(listing)["k"]
    assert sass.main_loop(k) is None and sass.mix(k)["loop_instructions"] == 0
    assert sass.main_loop(sass.parse(listing.replace("HMMA.16816.F32", "FMUL"))["k"]) == (0x90, 0xa0)
    # its shares are over the straight-line code: 0x00-0x80 and the EXIT, not the epilogue loop: 2 HMMA of 10
    m = sass.mix(k)
    assert m["straight_line_instructions"] == 10
    assert m["tensor_share"] == pytest.approx(0.2, abs=1e-4) and m["ffma_share"] == pytest.approx(0.1, abs=1e-4)


def test_straight_line_shares_leave_out_a_cold_copy_loop_and_need_no_main_loop():
    """A per-element copy loop (the unaligned path) is not what the tensor cores wait on; a kernel with a
    main loop has no straight-line shares."""
    cold = "".join(f"        /*{a:04x}*/                   LDG.E R2, desc[UR6][R2.64] ;\n" for a in (0xa0, 0xb0))
    listing = LISTING.replace("BRA `(.L_x_1)", "NOP").replace("BRA `(.L_x_0)", "NOP").replace(
        "        /*0090*/                   EXIT ;\n",
        "        /*0090*/                   EXIT ;\n.L_x_2:\n" + cold + "        /*00c0*/              @!P2 BRA `(.L_x_2) ;\n")
    m = sass.mix(sass.parse(listing)["k"])
    assert m["straight_line_instructions"] == 10 and m["tensor_share"] == pytest.approx(0.2, abs=1e-4)
    looped = sass.mix(sass.parse(LISTING)["k"])
    assert looped["loop_instructions"] == 4 and looped["straight_line_instructions"] == 0
    plain = sass.mix(sass.parse(LISTING.replace("BRA `(.L_x_1)", "NOP").replace("BRA `(.L_x_0)", "NOP")
                                .replace("HMMA.16816.F32", "FMUL"))["k"])
    assert plain["loop_instructions"] == 0 and plain["straight_line_instructions"] == 0


def test_straight_line_code_has_no_loop():
    k = sass.parse(LISTING.replace("BRA `(.L_x_1)", "NOP").replace("BRA `(.L_x_0)", "NOP"))["k"]
    assert sass.main_loop(k) is None
    assert sass.mix(k)["loop_instructions"] == 0


@pytest.mark.skipif(sass.nvdisasm_path() is None, reason="nvdisasm not installed")
def test_a_real_cubin_grid_stride_loop():
    from aotc.kernels.nvrtc_compile import compile_device
    src = r"""
    extern "C" __global__ void saxpy(const float *x, float *y, float a, int n) {
      for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
    }"""
    m = sass.cubin_mix(compile_device(src, "sm_90"))["saxpy"]
    assert 0 < m["loop_instructions"] < 30
    assert m["ffma_share"] == pytest.approx(1 / m["loop_instructions"], abs=1e-3)
    assert m["global_share"] == pytest.approx(3 / m["loop_instructions"], abs=1e-3)
    assert m["tensor_share"] == 0 and m["local_ops"] == 0


def test_mma_only_in_loops_holding_loops_takes_the_innermost_mma_loop_of_the_fast_path():
    """An attention's key loop holds its staging loops; built twice (aligned and per-element), the main loop is
    the mma-holding loop with no mma-holding loop inside, of the two the one with the larger tensor share."""
    def path(base, extra):
        a = base
        lines = [f".L_o{base}:\n"]
        lines.append(f"        /*{a:04x}*/                   LDG.E R2, desc[UR6][R2.64] ;\n")
        lines.append(f".L_i{base}:\n        /*{a + 0x10:04x}*/                   STS [R1], R2 ;\n")
        lines.append(f"        /*{a + 0x20:04x}*/              @!P0 BRA `(.L_i{base}) ;\n")
        a += 0x30
        for _ in range(2 + extra):
            lines.append(f"        /*{a:04x}*/                   FMUL R1, R2, R3 ;\n")
            a += 0x10
        lines.append(f"        /*{a:04x}*/                   HMMA.16816.F32 R4, R8, R10, R4 ;\n")
        lines.append(f"        /*{a + 0x10:04x}*/               @P1 BRA `(.L_o{base}) ;\n")
        return "".join(lines), a + 0x20
    fast, end = path(0x10, 0)
    slow, end = path(end, 4)
    listing = ("\t.section\t.text.k,\"ax\",@progbits\nk:\n        /*0000*/                   S2R R0, SR_TID.X ;\n"
               + fast + slow + f"        /*{end:04x}*/                   EXIT ;\n")
    k = sass.parse(listing)["k"]
    assert sass.main_loop(k) == (0x10, 0x70)
    m = sass.mix(k)
    assert m["loop_instructions"] == 7 and m["tensor_share"] == pytest.approx(1 / 7, abs=1e-4)
