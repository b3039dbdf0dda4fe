"""A retraction while HiCache backups are pending (0.5.23, issue 50): the replay's scheduler glue
(``islands_harness.sim_main``, the real tree cache, HiCache controller, host pools, allocator and
``ScheduleBatch.retract_decode``) with every transfer held pending for 4 polls
(``patches-main/0012``'s test knob). A decoding request is retracted while backups of the
shared prefix are still pending; every request then finishes, no transfer is left pending, and
each device pool is whole again (free + evictable = its size, nothing protected). Runs in each
0.5.23 environment: islands (``.venv-main-islands``, decode islands every 16 tokens) and stock
(``.venv-main``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from islands_harness.main_arm import HICACHE_COPY_DELAY_ENV, MAIN_ISLANDS_PYTHON, MAIN_PYTHON

REPO = Path(__file__).resolve().parents[2]
FULL, SWA = 4096, 1024

SCRIPT = r"""
import json, os, random, sys
import islands_harness.sim_main as sm
from sglang.srt.mem_cache.l2_transfer import PendingCpuCopies

HI = ("--enable-hierarchical-cache", "--hicache-io-backend", "direct")
islands = ("--enable-swa-islands", "--swa-islands-decode-interval", "16") if sys.argv[1] == "1" else ()
st = sm.build_main_stack(window=32, page=1, chunk=128, full_pool=%(full)d, swa_pool=%(swa)d,
                         max_reqs=9, args=(*islands, *HI))
sch, tree = sm.MainMiniScheduler(st, max_running=8), st.tree
cc = tree.cache_controller
rng = random.Random(0)
shared = [rng.randrange(4, 600) for _ in range(100)]
for i in range(6):
    sch.submit(f"r{i}", shared + [rng.randrange(4, 600) for _ in range(60)], 80)
out = {"retracted": [], "pending_at_retraction": 0}
for _ in range(2000):
    sch.step()
    pending = [a for a in cc.ack_write_queue if not a.finish_event.query()]
    decoding = sch.running_batch.reqs if not sch.running_batch.is_empty() else []
    if (not out["retracted"] and pending and len(decoding) >= 3
            and sch.last_batch is not None and sch.last_batch.forward_mode.is_decode()):
        retracted, _, _ = sch.running_batch.retract_decode()
        for r in retracted:
            sch._queue(r, is_retracted=True)
        out["retracted"] = [r.rid for r in retracted]
        out["pending_at_retraction"] = len(pending)
        out["held"] = all(isinstance(a.finish_event, PendingCpuCopies) for a in pending)
    if out["retracted"] and sch.idle():
        break
sch.run()
for _ in range(8):
    tree.check_hicache_events()
a = st.allocator
out.update(finished=len(sch.finished), acks=len(cc.ack_write_queue) + len(cc.ack_load_queue),
           ongoing=len(tree.ongoing_write_through) + len(tree.ongoing_load_back),
           full=[a.full_available_size(), tree.full_evictable_size(), tree.full_protected_size()],
           swa=[a.swa_available_size(), tree.swa_evictable_size(), tree.swa_protected_size()])
print(json.dumps(out))
""" % {"full": FULL, "swa": SWA}


@pytest.mark.parametrize("arm", ["islands", "stock"])
def test_a_retraction_while_backups_are_pending_leaves_every_pool_whole(arm):
    python = MAIN_ISLANDS_PYTHON if arm == "islands" else MAIN_PYTHON
    if not os.access(python, os.X_OK):
        pytest.skip(f"no {python} (scripts/setup_main.sh{' --islands' if arm == 'islands' else ''})")
    env = {**os.environ, **HICACHE_COPY_DELAY_ENV, "SGLANG_USE_CPU_ENGINE": "1",
           "PYTHONPATH": str(REPO)}
    p = subprocess.run([str(python), "-c", SCRIPT, "1" if arm == "islands" else "0"], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["retracted"] and out["pending_at_retraction"] > 0 and out["held"], out
    assert out["finished"] == 6 and out["acks"] == 0 and out["ongoing"] == 0, out
    assert out["full"][0] + out["full"][1] == FULL and out["full"][2] == 0, out
    assert out["swa"][0] + out["swa"][1] == SWA and out["swa"][2] == 0, out
