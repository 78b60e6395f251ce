"""The runner's command line: usage and configuration errors exit 2 with one clear line,
before Spark starts."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import PROJECT_DIR


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=PROJECT_DIR, capture_output=True,
                          text=True, timeout=120, check=False)


def test_missing_landing_folder_is_a_usage_error(tmp_path):
    result = _run("run", "--landing", str(tmp_path / "nowhere"))
    assert result.returncode == 2
    last = result.stdout.strip().splitlines()[-1]
    assert "FAILED: landing folder" in last and "does not exist; pass --landing DIR" in last


def test_unknown_target_is_a_usage_error():
    result = _run("run", "--target", "nope")
    assert result.returncode == 2
    assert "target 'nope' is not in profiles.yml (known: local" in result.stdout.strip().splitlines()[-1]


def test_bad_arguments_exit_2():
    assert _run("run", "--no-such-flag").returncode == 2
