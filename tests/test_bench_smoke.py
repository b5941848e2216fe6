"""The in-process bench scripts still run (CI runs no benchmark, so they could rot unseen):
tiny sizes, output shape only, never their figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_metrics_scrape_runs():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "metrics_scrape.py"), "--groups", "2",
                          "--partitions", "2", "--runs", "1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "4 share partitions, 1 runs, medians"
    assert [line.split()[0] for line in lines[1:]] == ["text", "openmetrics"]
