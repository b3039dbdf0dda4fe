"""Islands into an SGLang install we did not patch, and out again (scripts/install_islands.sh,
`scripts/patches.py status` / `revert`), on the real server.

The install is a fresh virtualenv with the stock release (`scripts/setup.sh --pristine`: the CPU
torch, the pinned wheel installed with `pip --no-deps`, the pinned pure-Python lock; nothing
applied), as close to `pip install sglang==0.5.15.post1` as a CPU machine allows (the wheel's own
dependencies pin a CUDA torch). deploy/Dockerfile's install step is the same script."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from islands_harness.server import REPO_ROOT, ServerStartError, SglangServer

pytestmark = pytest.mark.server

ARGS = ["--page-size", "1", "--chunked-prefill-size", "128", "--max-total-tokens", "4096",
        "--sleep-on-idle"]
SCHED = "srt/managers/scheduler.py"


@pytest.fixture(scope="module")
def stock_python(tmp_path_factory):
    venv = tmp_path_factory.mktemp("stock-sglang") / "venv"
    r = subprocess.run([str(REPO_ROOT / "scripts" / "setup.sh"), "--pristine"], cwd=REPO_ROOT,
                       env={**os.environ, "VENV": str(venv), "PYTHON": sys.executable},
                       capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, (r.stdout[-4000:], r.stderr[-4000:])
    return str(venv / "bin" / "python")


@pytest.fixture(scope="module")
def tiny_model():
    from islands_harness.tiny_model import build_tiny_model

    return build_tiny_model(window=32)


def tool(py, *args):
    return subprocess.run([py, str(REPO_ROOT / "scripts" / "patches.py"), *args],
                          capture_output=True, text=True, timeout=600)


def last_line(r) -> str:
    return r.stdout.strip().splitlines()[-1]


def test_install_serve_revert_and_refuse_a_hand_edit(stock_python, tiny_model):
    py = stock_python
    assert last_line(tool(py, "status")).endswith("pristine sglang 0.5.15.post1")

    inst = subprocess.run([str(REPO_ROOT / "scripts" / "install_islands.sh"), py],
                          capture_output=True, text=True, timeout=600)
    assert inst.returncode == 0, inst.stderr[-3000:]
    assert ": patched, series " in last_line(inst)
    again = subprocess.run([str(REPO_ROOT / "scripts" / "install_islands.sh"), py],
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "0 file(s) changed" in again.stdout

    with SglangServer(tiny_model, [*ARGS, "--enable-swa-islands"], python=py,
                      boot_timeout_s=900) as srv:
        assert len(srv.generate([5, 6, 7, 8], max_new_tokens=4).output_ids) == 4
        assert "impl=SWAIslandRadixCache" in srv.log_path.read_text()

    rev = tool(py, "revert")
    assert rev.returncode == 0 and "restored or removed; pristine" in rev.stdout
    assert last_line(tool(py, "status")).endswith("pristine sglang 0.5.15.post1")
    srv = SglangServer(tiny_model, [*ARGS, "--enable-swa-islands"], python=py, boot_timeout_s=900)
    with pytest.raises(ServerStartError, match="unrecognized arguments: --enable-swa-islands"):
        srv.start()

    # someone hand-edits a file the series touches: install and revert refuse, naming it
    assert subprocess.run([str(REPO_ROOT / "scripts" / "install_islands.sh"), py],
                          capture_output=True, text=True, timeout=600).returncode == 0
    site = subprocess.run([py, "-c", "import sglang, os; print(os.path.dirname(sglang.__file__))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site, SCHED), "a") as f:
        f.write("# a hot fix\n")
    for cmd in ([str(REPO_ROOT / "scripts" / "install_islands.sh"), py],
                [py, str(REPO_ROOT / "scripts" / "patches.py"), "revert"]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert r.returncode == 1 and SCHED in r.stderr, (cmd, r.stderr[-2000:])
    st = tool(py, "status")
    assert st.returncode == 3 and last_line(st).endswith(f"modified by someone else: {SCHED}")
