"""`aotc profile ENGINE`: the table, the --json shape of the issue, and one-line errors."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from aotc.cli.main import main
from aotc.kernels.host_compile import have_host_compiler
from tests.profile.test_engine_profile import build_hand_engine

pytestmark = pytest.mark.skipif(not have_host_compiler(), reason="no host C++ compiler")


@pytest.fixture(scope="module")
def hand_engine() -> bytes:
    return build_hand_engine()


def test_cli_json_shape_and_table(tmp_path, hand_engine):
    path = tmp_path / "hand.engine"
    path.write_bytes(hand_engine)
    r = CliRunner().invoke(main, ["profile", str(path), "--json", "--arch", "sm_90"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    k = doc["kernels"][0]
    for key in ("name", "kind", "global", "shared", "occupancy", "spill_bytes", "predicted_us"):
        assert key in k
    assert set(k["global"]) >= {"load_efficiency", "store_efficiency", "sectors_per_request"}
    assert set(k["occupancy"]) == {"sm_90"} and "limiter" in k["occupancy"]["sm_90"]
    assert set(doc["predicted_us"]) == set(doc["roofline_floor_us"]) == {"sm_90"}
    r = CliRunner().invoke(main, ["profile", str(path)])
    assert r.exit_code == 0, r.output
    assert "gather" in r.output and "12.5%" in r.output and "roofline floor" in r.output


def test_cli_errors_are_one_line(tmp_path, hand_engine):
    path = tmp_path / "hand.engine"
    path.write_bytes(hand_engine)
    r = CliRunner().invoke(main, ["profile", str(path), "--arch", "sm_70"])
    assert r.exit_code != 0 and "no cubin for sm_70" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["profile", str(path), "--dim", "batch=2"])
    assert r.exit_code != 0 and "unknown dim" in r.output


def test_cli_sample_blocks(tmp_path, hand_engine):
    path = tmp_path / "hand.engine"
    path.write_bytes(hand_engine)
    r = CliRunner().invoke(main, ["profile", str(path), "--json", "--sample-blocks", "2"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["sample_blocks"] == 2 and [k["sampled_blocks"] for k in doc["kernels"]] == [[2, 8], [1, 1]]
    r = CliRunner().invoke(main, ["profile", str(path), "--sample-blocks", "2"])
    assert r.exit_code == 0 and "at most 2 blocks per launch; 1 of 2 launches ran a sample" in r.output
    r = CliRunner().invoke(main, ["profile", str(path), "--sample-blocks", "0"])
    assert r.exit_code != 0 and "--sample-blocks" in r.output and "Traceback" not in r.output
