"""`examples/train_mlp.py` runs end to end in a fresh interpreter and its loss goes down."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import run_code

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "train_mlp.py"


def test_train_mlp_loss_decreases() -> None:
    proc = run_code("", args=[str(SCRIPT), "--steps", "40", "--print-every", "10", "--threshold", "0"], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    losses = [float(m) for m in re.findall(r"step +\d+ +loss ([0-9.]+)", proc.stdout)]
    assert len(losses) == 5, proc.stdout  # steps 1, 10, 20, 30, 40
    first, final = re.search(r"first loss ([0-9.]+)\s+final loss ([0-9.]+)", proc.stdout).groups()
    assert float(final) < float(first) * 0.8, proc.stdout
    assert "test accuracy" in proc.stdout


def test_train_mlp_fails_below_threshold() -> None:
    proc = run_code("", args=[str(SCRIPT), "--steps", "1", "--threshold", "1.01"], timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "below the threshold" in proc.stderr
