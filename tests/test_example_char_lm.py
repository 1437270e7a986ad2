"""`examples/char_lm.py` (a tiny GPT on a text file) trains end to end in a fresh interpreter and prints a sample."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import run_code

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "char_lm.py"
TINY = ["--layers", "1", "--dim", "32", "--heads", "2", "--block-size", "16", "--batch-size", "8", "--lr", "1e-2"]


def test_char_lm_loss_decreases_and_samples() -> None:
    args = [str(SCRIPT), *TINY, "--steps", "30", "--print-every", "10", "--sample-tokens", "40"]
    proc = run_code("", args=args, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    losses = [float(m) for m in re.findall(r"step +\d+ +loss ([0-9.]+)", proc.stdout)]
    assert len(losses) == 4, proc.stdout  # steps 1, 10, 20, 30
    assert losses[-1] < losses[0] * 0.9, proc.stdout
    first, final = re.search(r"first loss ([0-9.]+)\s+final loss ([0-9.]+)", proc.stdout).groups()
    assert (float(first), float(final)) == (losses[0], losses[-1]), proc.stdout
    sample = proc.stdout.split("sample:\n", 1)[1]
    assert len(sample) == 41 and sample.endswith("\n"), proc.stdout  # 40 characters and print's newline


def test_char_lm_rejects_heads_not_dividing_dim() -> None:
    proc = run_code("", args=[str(SCRIPT), "--dim", "30", "--heads", "4", "--steps", "1"], timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr  # argparse's usage error
    assert "not a multiple of --heads" in proc.stderr
