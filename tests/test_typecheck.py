"""mypy is part of the test suite, as ruff is: CI type-checks the three distributions (settings in pyproject.toml)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_finds_no_errors():
    # The cache (.mypy_cache, beside ruff's) makes a re-run over unchanged code take a few seconds.
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
