"""Stock sglang 0.5.23 (`.venv-main`) runs HiCache (`--enable-hierarchical-cache`) on the CPU
harness: device KV evicted to the host tier is loaded back on a hit, and the outputs stay
token-for-token those of transformers (issue 50, part 1).

Stock 0.5.23 cannot run HiCache on a CPU device pool; the harness-only
`patches-main/0012-harness-only-hicache-on-a-cpu-device-pool.patch` (in `series-stock`, so in
`.venv-main`) makes it run: a host pool without CUDA host registration, the direct io backend's
copies as torch indexed copies, no stream synchronize on a CPU stream
(`patches-main/README.md`). Only `--hicache-io-backend direct` runs on CPU.

One boot per write policy, each on the other host layout, so that the two boots cover every op
the patch adds: `write_through` on the default layout (`page_first`, which the direct backend
turns into `page_first_direct`: backup `transfer_kv_all_layer_direct_lf_pf`, load
`transfer_kv_per_layer_direct_pf_lf`) and `write_back` on `layer_first` (`transfer_kv_direct`
both ways). The tiny hybrid-SWA model (window 32), page 1, chunk 64, a 1024-token full device
pool and a 512-token SWA pool, a host pool of twice the device pool (the default ratio, 2049 and
1025 tokens). A 300-token prompt A is served, then four 400-token fillers (1,632 tokens with
their outputs) push A out of the device pool; A again must hit from the host tier
(`cached_tokens_details` `{"device": 0, "host": 299}`, `sglang:cached_tokens_total
{cache_source="host"}`, `sglang:load_back_tokens_total` for both pools), and A extended hits A's
prompt on the device, where the load put it back. Every output equals transformers' greedy one;
a load that copied wrong rows changes A's continuation (checked by hand with the page-first load
zeroing its rows: both requests after the load diverge from the first token).

`HICACHE_MAIN_PYTHON` names another stock 0.5.23 interpreter (default `.venv-main/bin/python`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import time
from pathlib import Path

import pytest

from islands_harness.client import GenerateResult, Metrics, fetch_metrics
from islands_harness.server import REPO_ROOT, SglangServer

MAIN_PY = Path(os.environ.get("HICACHE_MAIN_PYTHON")
               or REPO_ROOT / ".venv-main" / "bin" / "python")
PATCH = "0012-harness-only-hicache-on-a-cpu-device-pool.patch"
PATCHES = REPO_ROOT / "patches-main"

needs_main = pytest.mark.skipif(
    not os.access(MAIN_PY, os.X_OK),
    reason=f"no stock 0.5.23 environment at {MAIN_PY} (build it with scripts/setup_main.sh)")

WINDOW = 32
MAX_NEW = 8
PROMPT, FILLER, FILLERS, EXTRA = 300, 400, 4, 20
DEVICE_FULL_TOKENS = 1024
SERVER_ARGS = [
    "--page-size", "1",
    "--chunked-prefill-size", "64",
    "--max-total-tokens", str(DEVICE_FULL_TOKENS),
    "--swa-full-tokens-ratio", "0.5",
    "--enable-metrics",
    "--enable-hierarchical-cache",
    "--hicache-io-backend", "direct",
]
# write policy -> host layout: together every op the patch adds
POLICIES = {"write_through": "page_first", "write_back": "layer_first"}


def _listed(name: str) -> list[str]:
    return [ln.strip() for ln in (PATCHES / name).read_text().splitlines()
            if ln.strip() and not ln.lstrip().startswith("#")]


def test_the_patch_is_in_both_series():
    assert (PATCHES / PATCH).is_file()
    assert PATCH in _listed("series") and PATCH in _listed("series-stock")
    text = (PATCHES / PATCH).read_text()
    assert "Subject: [PATCH] harness-only:" in text
    for rel in ("mem_cache/pool_host/common.py", "mem_cache/pool_host/_kvcacheio.py",
                "mem_cache/pool_host/mha.py", "mem_cache/l2_transfer.py"):
        assert f"+++ b/python/sglang/srt/{rel}" in text, rel


@dataclasses.dataclass
class Served:
    policy: str
    layout: str
    requests: dict[str, tuple[list[int], GenerateResult]]
    metrics: Metrics
    log: str
    seconds: float


def workload() -> list[tuple[str, list[int]]]:
    rng = random.Random(50)

    def toks(n):
        return [rng.randrange(4, 700) for _ in range(n)]  # ids 0..3 are special

    a = toks(PROMPT)
    fillers = [(f"filler{i}", toks(FILLER)) for i in range(FILLERS)]
    return [("A", a), *fillers, ("A_again", a), ("A_extended", a + toks(EXTRA))]


@pytest.fixture(scope="module")
def tiny_model():
    from islands_harness.tiny_model import build_tiny_model
    return build_tiny_model(window=WINDOW)


def _installed_patches() -> list[str]:
    """The patches `scripts/patches_main.py apply` recorded in MAIN_PY's sglang."""
    for pkg in MAIN_PY.parent.parent.glob("lib/python*/site-packages/sglang"):
        manifest = pkg / ".islands_harness_main_patches.json"
        if manifest.is_file():
            return json.loads(manifest.read_text()).get("patches", [])
    return []


@pytest.fixture(scope="module", params=list(POLICIES))
def served(request, tiny_model) -> Served:
    if PATCH not in _installed_patches():
        pytest.fail(f"{MAIN_PY} predates {PATCH}: rebuild it with scripts/setup_main.sh "
                    "(stock 0.5.23 cannot run HiCache on CPU without it)")
    policy, layout = request.param, POLICIES[request.param]
    args = [*SERVER_ARGS, "--hicache-write-policy", policy, "--hicache-mem-layout", layout]
    t0 = time.monotonic()
    srv = SglangServer(tiny_model, args, python=str(MAIN_PY), omp_threads=1, boot_timeout_s=300)
    with srv:
        done = {name: (ids, srv.generate(ids, max_new_tokens=MAX_NEW))
                for name, ids in workload()}
        metrics = fetch_metrics(srv.base_url)
    return Served(policy, layout, done, metrics, srv.log_path.read_text(errors="replace"),
                  time.monotonic() - t0)


@pytest.fixture(scope="module")
def oracle(tiny_model):
    from islands_harness.hf_oracle import greedy_decode
    names, prompts = zip(*workload())
    return dict(zip(names, greedy_decode(tiny_model, prompts, MAX_NEW)))


@pytest.mark.server
@needs_main
def test_evicted_prefix_is_loaded_back_from_the_host_tier(served):
    log = served.log
    assert "'enable_hierarchical_cache': True" in log
    assert f"'hicache_write_policy': '{served.policy}'" in log
    want = "page_first_direct" if served.layout == "page_first" else served.layout
    assert f"'hicache_mem_layout': '{want}'" in log
    assert "hicache_attached=True" in log and "Allocating swa hierarchical KV host pool" in log
    r = served.requests
    assert r["A"][1].cached_tokens == 0
    # A was pushed out of the 1024-token device pool by the fillers: its hit is all host
    details = r["A_again"][1].meta_info.get("cached_tokens_details")
    assert details == {"device": 0, "host": PROMPT - 1}, details
    assert r["A_again"][1].cached_tokens == PROMPT - 1
    # the load put A back on the device: the extension hits A's prompt there
    details = r["A_extended"][1].meta_info.get("cached_tokens_details")
    assert details == {"device": PROMPT, "host": 0}, details
    m = served.metrics
    assert m.value("sglang:cached_tokens_total", {"cache_source": "host"}) == PROMPT - 1
    assert m.value("sglang:load_back_tokens_total", {"pool": "kv"}) == PROMPT - 1
    assert m.value("sglang:load_back_tokens_total", {"pool": "swa"}) > 0
    assert m.value("sglang:hicache_backup_tokens_total", {"pool": "kv"}) >= PROMPT
    assert m.value("sglang:hicache_backup_tokens_total", {"pool": "swa"}) > 0
    assert "Traceback" not in log.split("The server is fired up", 1)[-1]


@pytest.mark.server
@needs_main
def test_outputs_equal_transformers(served, oracle):
    diffs = {name: (got.output_ids, oracle[name])
             for name, (_, got) in served.requests.items() if got.output_ids != oracle[name]}
    assert not diffs, f"{served.policy}: server != transformers (server, hf): {diffs}"
