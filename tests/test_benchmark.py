"""`tinycore bench` and `tinycore.benchmark`: every workload runs for every library, ratios follow the unit's
direction, and bad arguments are usage errors. (What is measured is never asserted: benchmarks are not tests.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tinycore import benchmark


def test_every_workload_computes_what_numpy_computes():
    for name, work in benchmark.WORKLOADS.items():
        mine, reference = work.build("tinycore", 0.001, "PYTHON"), work.build("numpy", 0.001, None)
        if reference is None:  # tinycore-only workloads (the JIT) are checked against the eager one
            reference = benchmark.WORKLOADS["chain20_eager"].build("tinycore", 0.001, "PYTHON")
            np.testing.assert_allclose(mine().numpy(), reference().numpy(), rtol=1e-5, err_msg=name)
            continue
        np.testing.assert_allclose(np.asarray(mine().numpy()), np.asarray(reference()), rtol=2e-4, err_msg=name)


def _result(library: str, unit: str, seconds: float, amount: float = 1e9) -> benchmark.Result:
    return benchmark.Result("w", library, unit, seconds=[seconds, seconds, seconds * 3], amount=amount)


def test_ratio_follows_the_units_direction():
    slow_dispatch = [_result("tinycore", "us/call", 4e-6), _result("numpy", "us/call", 1e-6)]
    assert benchmark.ratio(slow_dispatch, "w") == pytest.approx(0.25)
    fast_bandwidth = [_result("tinycore", "GB/s", 0.5), _result("numpy", "GB/s", 1.0), _result("torch", "GB/s", 2.0)]
    assert benchmark.ratio(fast_bandwidth, "w") == pytest.approx(2.0)  # best peer (numpy at 1 s) is the reference
    assert benchmark.ratio([_result("tinycore", "GB/s", 1.0)], "w") is None
    assert "2.00x" in benchmark.format_table(fast_bandwidth)


def test_unknown_workload_is_a_value_error():
    with pytest.raises(ValueError, match="unknown workload"):
        benchmark.run_benchmarks(["nope"])


def test_cli_bench_json_has_a_row_per_library(run_python):
    out = run_python(
        "",
        args=[
            "-m",
            "tinycore",
            "bench",
            "--only",
            "dispatch,sum",
            "--device",
            "PYTHON",
            "--scale",
            "0.001",
            "--rounds",
            "1",
            "--budget",
            "0.05",
            "--json",
        ],
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    rows = {(row["workload"], row["library"]) for row in report["results"]}
    assert {("dispatch", "tinycore"), ("dispatch", "numpy"), ("sum", "tinycore"), ("sum", "numpy")} <= rows
    assert all(row["value"] > 0 and row["calls"] >= 3 for row in report["results"])
    assert report["ratios"]["sum"] > 0 and "[bench] sum: round 1/1" in out.stderr
    assert report["device"] == "PYTHON" and "> 1: tinycore is better" in report["ratio"]
    assert {row["size"] for row in report["results"] if row["workload"] == "sum"} == {"4,194 floats"}


def test_cli_bench_quick_table_names_device_sizes_and_the_ratio(run_python):
    out = run_python("", args=["-m", "tinycore", "bench", "--quick", "--only", "dispatch,matmul", "--device", "PYTHON"])
    assert out.returncode == 0, out.stderr
    header, columns, *rows = out.stdout.strip().splitlines()
    assert header.startswith("tinycore on PYTHON; ratio: tinycore against the best peer, > 1: tinycore is better")
    assert columns.split()[:3] == ["workload", "size", "unit"]
    assert rows[0].startswith("dispatch         x+1, 16 floats") and "float32" in rows[1]


def test_cli_version(run_python):
    out = run_python("", args=["-m", "tinycore", "--version"])
    assert out.returncode == 0 and out.stdout.strip().startswith("tinycore 0.")


def test_cli_bench_rejects_unknown_workloads(run_python):
    out = run_python("", args=["-m", "tinycore", "bench", "--only", "warp_speed"])
    assert out.returncode == 2 and "unknown workload" in out.stderr and "dispatch" in out.stderr
