"""tools/device_check.sh, the one-command real-GPU run (issue #17's device half), works as
a script: phases dispatch, each phase's log and the summary land in $OUT, an unknown phase
is reported, and a phase with no time left is skipped rather than started.  Its GPU phases
run on a lent device; here only the plumbing (under the CUDA simulator) is checked."""
import os
import shutil
import subprocess
import sys

import pytest

import fastnn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tools", "device_check.sh")

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or not os.path.exists(SCRIPT),
                                reason="needs bash and the repository's tools/ folder")


def _run(tmp_path, *phases, **env):
    e = dict(os.environ, OUT=str(tmp_path), PYTHON=sys.executable, DEVICE_CHECK_SMOKE="1")
    e.update(env)
    return subprocess.run(["bash", SCRIPT, *phases], env=e, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def test_script_parses():
    assert subprocess.run(["bash", "-n", SCRIPT]).returncode == 0


def test_info_phase_and_summary(tmp_path):
    r = _run(tmp_path, "info", "nonsense")
    assert r.returncode == 0, r.stderr
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert summary[0].startswith("info: exit 0 in "), summary
    assert summary[1].startswith("unknown phase nonsense"), summary
    log = (tmp_path / "info.log").read_text()
    assert "fastnn" in log, log
    if "cuda" in fastnn.available_backends():     # numba-cuda here: the simulator's device
        assert "'cuda'" in log, log


def test_phase_without_time_left_is_skipped(tmp_path):
    r = _run(tmp_path, "tests", DEVICE_CHECK_SECONDS="5")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "summary.txt").read_text().strip() == "tests: skipped, no time left"
    assert not (tmp_path / "tests.log").exists()
