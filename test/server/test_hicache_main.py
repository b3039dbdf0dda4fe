"""HiCache (`--enable-hierarchical-cache`) on 0.5.23 on the CPU harness, stock and with islands
(issue 50): device KV evicted to the host tier is loaded back on a hit, islands' windows go to the
host with every island, and every output stays token-for-token transformers'.

Arms: `main` (stock 0.5.23, `.venv-main`, or `HICACHE_MAIN_PYTHON`), `main_islands`
(`.venv-main-islands`, `--enable-swa-islands`: `auto` eviction, the window order at this pool, on
the Python tree core; each match or insert end backs up its own window) and `main_islands_lru`
(the same with main's SWA walk, `--swa-islands-eviction lru`, on the Rust tree core). Stock
0.5.23 cannot run HiCache on a CPU device pool; the harness-only `patches-main/0012` (in both series) makes it run
(`patches-main/README.md`). Only `--hicache-io-backend direct` runs on CPU.

One boot per arm and write policy, each policy on the other host layout so that the boots cover
every op 0012 adds: `write_through` on `page_first` (`page_first_direct`), `write_back` on
`layer_first`. Every boot holds its transfers back (`HICACHE_COPY_DELAY_ENV`, 0012's test knob):
each ack is seen at its 4th poll and each backup copies the device pool only then, as a GPU's
asynchronous copy may, so the requests below land while backups and loads are pending and a
free under a pending backup reaches the host copy. Tiny hybrid-SWA model (window 32), page 1, chunk 64, a 1024-token full device pool,
a 512-token SWA pool, a host pool of 4 times that. The workload, in order:
- A (300 tokens), four 400-token fillers that push A out of the device pool, A again (its hit is
  all host: 299), A extended (hits A's prompt on the device, where the load put it), A's first
  150 tokens + 20 new ones (no window ends at 150: islands' patch 0015 reports the SWA cut, the
  tokens the full-attention cache held past the hit, per request and in
  `sglang:swa_cut_tokens_total`);
- B (100 tokens, 160 generated: decode islands every 16 tokens), four more fillers, then C = B's
  prompt + B's first 120 output tokens + 10 new ones: islands wrote a window through at every
  island, so C hits B's output from the host tier; stock main wrote B's output window only at
  its end, and C's match stops where SWA ends;
- a 1,000-token prompt aborted mid-prefill (backups of its chunks pending), a flush, a tick:
  both device pools and the host tier back at baseline.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import time
from pathlib import Path

import pytest

from islands_harness.client import GenerateResult, Metrics, StreamingRequest, fetch_metrics
from islands_harness.conversations import flush_cache_when_idle
from islands_harness.main_arm import HICACHE_COPY_DELAY_ENV, MAIN_ISLANDS_PYTHON
from islands_harness.server import REPO_ROOT, SglangServer, drop_benign_warnings
from islands_tools import swa_cut

MAIN_PY = Path(os.environ.get("HICACHE_MAIN_PYTHON")
               or REPO_ROOT / ".venv-main" / "bin" / "python")
ISLANDS = ["--enable-swa-islands", "--swa-islands-decode-interval", "16"]
ARMS = {"main": (MAIN_PY, []),
        "main_islands": (MAIN_ISLANDS_PYTHON, ISLANDS),
        "main_islands_lru": (MAIN_ISLANDS_PYTHON, [*ISLANDS, "--swa-islands-eviction", "lru"])}
EVICTION = {"main_islands": "window", "main_islands_lru": "lru"}
"""The eviction order each island arm runs: ``auto`` resolves to the window order at this SWA
pool (it cannot keep a chunk per running request); ``lru`` is main's walk."""
PATCH = "0012-harness-only-hicache-on-a-cpu-device-pool.patch"
PATCHES = REPO_ROOT / "patches-main"

WINDOW = 32
MAX_NEW = 8
PROMPT, FILLER, FILLERS, EXTRA, BRANCH_AT = 300, 400, 4, 20, 150
B_PROMPT, B_NEW, C_AT, C_NEW, ISLAND_EVERY = 100, 160, 120, 10, 16
ABORT_PROMPT = 1000
DEVICE_FULL_TOKENS = 1024
SERVER_ARGS = [
    "--page-size", "1",
    "--chunked-prefill-size", "64",
    "--max-total-tokens", str(DEVICE_FULL_TOKENS),
    "--swa-full-tokens-ratio", "0.5",
    "--enable-metrics",
    "--enable-hierarchical-cache",
    "--hicache-io-backend", "direct",
    # a host pool that holds the workload's windows, so that C's hit shows what each arm wrote
    # through rather than the host's LRU order: at the default 2 with held transfers (pending
    # backups lock their nodes, so the device gives windows up in another order), islands'
    # 10 overlapping decode-island windows of B (every 16 tokens, window 32) lost their oldest
    # nodes to the fillers' backups and C hit 0 where stock main kept B's prompt end (100)
    "--hicache-ratio", "4",
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
    arm: str
    policy: str
    layout: str
    requests: dict[str, tuple[list[int], GenerateResult]]
    metrics: Metrics
    after_flush: Metrics
    aborted: bool
    log: str
    seconds: float
    advice: str | None  # scripts/swa_pool_plan.py --metrics-url on the islands arm


def _toks(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(4, 700) for _ in range(n)]  # ids 0..3 are special


def first_workload() -> list[tuple[str, list[int], int]]:
    """(name, prompt, max_new_tokens) up to B; C depends on B's output."""
    rng = random.Random(50)
    a = _toks(rng, PROMPT)
    fillers = [(f"filler{i}", _toks(rng, FILLER), MAX_NEW) for i in range(FILLERS)]
    b = _toks(rng, B_PROMPT)
    more = [(f"filler_b{i}", _toks(rng, FILLER), MAX_NEW) for i in range(FILLERS)]
    branch = a[:BRANCH_AT] + _toks(random.Random(53), EXTRA)
    return [("A", a, MAX_NEW), *fillers, ("A_again", a, MAX_NEW),
            ("A_extended", a + _toks(rng, EXTRA), MAX_NEW), ("A_branch", branch, MAX_NEW),
            ("B", b, B_NEW), *more]


def c_prompt(b_prompt: list[int], b_output: list[int]) -> list[int]:
    return b_prompt + b_output[:C_AT] + _toks(random.Random(51), C_NEW)


@pytest.fixture(scope="module")
def tiny_model():
    from islands_harness.tiny_model import build_tiny_model
    return build_tiny_model(window=WINDOW)


def _installed_patches(python: Path) -> list[str]:
    """The patches `scripts/patches_main.py apply` recorded in ``python``'s sglang."""
    for pkg in python.parent.parent.glob("lib/python*/site-packages/sglang"):
        manifest = pkg / ".islands_harness_main_patches.json"
        if manifest.is_file():
            return json.loads(manifest.read_text()).get("patches", [])
    return []


def _abort_mid_prefill(srv: SglangServer) -> bool:
    """A 1,000-token prompt (16 chunks) aborted after its second prefill batch."""
    ids = _toks(random.Random(52), ABORT_PROMPT)
    mark = len(srv.log_path.read_text(errors="replace"))
    req = StreamingRequest(srv.base_url, ids, MAX_NEW, name="abort").start()
    deadline = time.monotonic() + 300
    while srv.log_path.read_text(errors="replace")[mark:].count("Prefill batch") < 2:
        assert time.monotonic() < deadline, "the long prompt never started its prefill"
        time.sleep(0.05)
    req.abort()
    req.wait(300)
    return req.aborted


class Runs:
    """One boot per (arm, policy), run once on first use and kept: a test comparing the arms
    reads both without a second boot, and only one server runs at a time."""

    def __init__(self, model: str):
        self.model, self._done = model, {}

    def get(self, arm: str, policy: str) -> Served:
        if (arm, policy) not in self._done:
            self._done[arm, policy] = self._serve(arm, policy)
        return self._done[arm, policy]

    def _serve(self, arm: str, policy: str) -> Served:
        python, flags = ARMS[arm]
        if not os.access(python, os.X_OK):
            pytest.skip(f"no {arm} environment at {python} (scripts/setup_main.sh"
                        f"{' --islands' if arm == 'main_islands' else ''})")
        if PATCH not in _installed_patches(python):
            pytest.fail(f"{python} predates {PATCH}: rebuild it with scripts/setup_main.sh "
                        "(stock 0.5.23 cannot run HiCache on CPU without it)")
        layout = POLICIES[policy]
        args = [*SERVER_ARGS, *flags, "--hicache-write-policy", policy,
                "--hicache-mem-layout", layout]
        t0 = time.monotonic()
        srv = SglangServer(self.model, args, python=str(python), omp_threads=1,
                           boot_timeout_s=300, env=HICACHE_COPY_DELAY_ENV)
        with srv:
            done = {name: (ids, srv.generate(ids, max_new_tokens=n))
                    for name, ids, n in first_workload()}
            c = c_prompt(done["B"][0], done["B"][1].output_ids)
            done["C"] = (c, srv.generate(c, max_new_tokens=MAX_NEW))
            metrics = fetch_metrics(srv.base_url)
            advice = (swa_cut.advice(swa_cut.read(srv.base_url + "/metrics"), 0.5)
                      if arm in EVICTION else None)
            aborted = _abort_mid_prefill(srv)
            flush_cache_when_idle(srv)
            srv.generate([5, 6, 7], 2)  # a tick: the gauges refresh on the scheduler's log path
            time.sleep(1.0)
            after_flush = fetch_metrics(srv.base_url)
        return Served(arm, policy, layout, done, metrics, after_flush, aborted,
                      srv.log_path.read_text(errors="replace"), time.monotonic() - t0, advice)


@pytest.fixture(scope="module")
def runs(tiny_model) -> Runs:
    return Runs(tiny_model)


@pytest.fixture(scope="module")
def oracle(tiny_model, runs):
    """transformers' greedy output of every request (C's prompt from the first arm's B, which
    the equality test checks against transformers' B anyway)."""
    from islands_harness.hf_oracle import greedy_decode
    names, prompts, news = zip(*first_workload())
    out = dict(zip(names, greedy_decode(tiny_model, prompts, list(news))))
    c = c_prompt(dict(zip(names, prompts))["B"], out["B"])
    out["C"] = greedy_decode(tiny_model, [c], MAX_NEW)[0]
    return out


def _host_hit(r: GenerateResult) -> int:
    return int((r.meta_info.get("cached_tokens_details") or {}).get("host", 0))


@pytest.mark.server
@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("arm", list(ARMS))
def test_evicted_prefix_is_loaded_back_from_the_host_tier(runs, arm, policy):
    served = runs.get(arm, policy)
    log = served.log
    assert "'enable_hierarchical_cache': True" in log
    assert f"'hicache_write_policy': '{policy}'" in log
    want = "page_first_direct" if served.layout == "page_first" else served.layout
    assert f"'hicache_mem_layout': '{want}'" in log
    assert "hicache_attached=True" in log and "Allocating swa hierarchical KV host pool" in log
    if arm in EVICTION:
        assert "SWAIslandUnifiedRadixCache" in log and f"eviction {EVICTION[arm]}" in log
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
    assert m.value("sglang:cached_tokens_total", {"cache_source": "host"}) >= PROMPT - 1
    assert m.value("sglang:load_back_tokens_total", {"pool": "kv"}) >= PROMPT - 1
    assert m.value("sglang:load_back_tokens_total", {"pool": "swa"}) > 0
    assert m.value("sglang:hicache_backup_tokens_total", {"pool": "kv"}) >= PROMPT
    assert m.value("sglang:hicache_backup_tokens_total", {"pool": "swa"}) > 0
    assert "Traceback" not in log.split("The server is fired up", 1)[-1]


@pytest.mark.server
@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("arm", list(ARMS))
def test_outputs_equal_transformers(runs, oracle, arm, policy):
    served = runs.get(arm, policy)
    diffs = {name: (got.output_ids, oracle[name])
             for name, (_, got) in served.requests.items() if got.output_ids != oracle[name]}
    assert not diffs, f"{arm}/{policy}: server != transformers (server, hf): {diffs}"


@pytest.mark.server
def test_islands_windows_on_the_host_tier_hit_a_branch_into_evicted_output(runs):
    """C branches off B's output 120 tokens in, after B was evicted from the device: under
    write_through every decode island wrote its window through, so islands hit C to at least its
    last island below the branch, from the host; stock main hit less (its only output window on
    the host is B's end). Under write_back the windows go to the host only as they are evicted,
    so islands hit at least stock's there. Under either eviction order."""
    floor = B_PROMPT + C_AT - ISLAND_EVERY
    off = runs.get("main", "write_through").requests["C"][1]
    for arm in EVICTION:
        on = runs.get(arm, "write_through").requests["C"][1]
        assert on.cached_tokens >= floor, (arm, on.cached_tokens, floor, on.meta_info)
        assert _host_hit(on) > 0, (arm, on.meta_info)
        assert on.cached_tokens > off.cached_tokens, (arm, on.cached_tokens, off.cached_tokens)
        for policy in POLICIES:
            on_c = runs.get(arm, policy).requests["C"][1]
            off_c = runs.get("main", policy).requests["C"][1]
            assert on_c.cached_tokens >= off_c.cached_tokens, (arm, policy, on_c.cached_tokens,
                                                                off_c.cached_tokens)


@pytest.mark.server
@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("arm", list(ARMS))
def test_an_abort_mid_prefill_and_a_flush_leave_both_tiers_at_baseline(runs, arm, policy):
    served = runs.get(arm, policy)
    assert served.aborted
    m = served.after_flush
    tick = 5  # the tick after the flush: 3 prompt + 2 generated tokens, cached (and written through)
    assert "sglang:hicache_host_used_tokens" in m
    assert m.value("sglang:hicache_host_used_tokens") <= tick, "host tier not back at baseline"
    for pool in ("kv", "swa"):
        held = sum(m.value(f"sglang:{pool}_{k}_tokens", default=0.0) for k in ("used", "evictable"))
        assert held <= tick, (pool, held)
    log, _ = drop_benign_warnings(served.log)
    for alarm in ("Traceback (most recent call last)", "Mem Leak Detected"):
        assert alarm not in log, alarm


@pytest.mark.server
@pytest.mark.parametrize("policy", list(POLICIES))
def test_islands_report_the_swa_cut_per_request_and_in_metrics(runs, policy):
    """A's branch at 150 finds A's full-attention KV to 150 but no window ending there: hit +
    cut = 150 in its cached_tokens_details, and the counter sums every request's cut."""
    served = runs.get("main_islands", policy)
    cuts = {n: (r.meta_info.get("cached_tokens_details") or {}).get("swa_cut", 0)
            for n, (_, r) in served.requests.items()}
    branch = served.requests["A_branch"][1]
    assert cuts["A_branch"] > 0, branch.meta_info
    assert branch.cached_tokens + cuts["A_branch"] == BRANCH_AT, branch.meta_info
    assert served.metrics.value("sglang:swa_cut_tokens_total") == sum(cuts.values()), cuts
    share = sum(cuts.values()) / (sum(cuts.values()) + served.metrics.value(
        "sglang:cached_tokens_total"))
    assert f"SWA cut share of the full-attention hits: {share:.1%}" in served.advice, served.advice
