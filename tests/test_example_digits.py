"""`examples/digits.py` trains a CNN on scikit-learn's digits in a fresh interpreter, saves it and reloads it."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest
from conftest import run_code

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "digits.py"

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec(name) is None, reason=f"examples/digits.py needs {package} (pip install '.[examples]')"
    )
    for name, package in (("sklearn", "scikit-learn"), ("tqdm", "tqdm"))
]


def digits(*args: str) -> subprocess.CompletedProcess[str]:
    return run_code("", args=[str(SCRIPT), *args], timeout=300)


def reported_accuracy(proc: subprocess.CompletedProcess[str]) -> float:
    match = re.search(r"test accuracy ([0-9.]+)", proc.stdout)
    assert match, proc.stdout + proc.stderr
    return float(match.group(1))


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """Train 3 epochs (a few seconds) and save the weights: (the weights' path, the reported test accuracy)."""
    weights = tmp_path_factory.mktemp("digits") / "digits.safetensors"
    proc = digits("--epochs", "3", "--min-accuracy", "0.9", "--save", str(weights))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "device " in proc.stdout and weights.is_file(), proc.stdout
    assert "loss=" in proc.stderr and "acc=" in proc.stderr  # the tqdm bar
    return weights, reported_accuracy(proc)


def test_trains_above_90_percent(trained: tuple[Path, float]) -> None:
    assert trained[1] > 0.90


def test_load_reports_the_same_accuracy(trained: tuple[Path, float]) -> None:
    weights, accuracy = trained
    proc = digits("--load", str(weights), "--min-accuracy", "0.9")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "epoch" not in proc.stderr  # evaluation only: no training
    assert reported_accuracy(proc) == accuracy


def test_fails_below_min_accuracy(trained: tuple[Path, float]) -> None:
    proc = digits("--load", str(trained[0]), "--min-accuracy", "1.01")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "below --min-accuracy" in proc.stderr
