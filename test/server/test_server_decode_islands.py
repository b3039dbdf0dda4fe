"""Decode islands on the real SGLang server (CPU, tiny hybrid-SWA model): a running request's output
is prefix-reusable while it runs, token for token the same outputs as the islands-off server.

Two boots with identical arguments (`SERVER_ARGS`: window 32, chunked prefill 512, page 1, default
decode-island interval 512/4 = 128), one of them with `--enable-swa-islands`, run the same
temperature-0 workload (`run_arm`), with the cache flushed between experiments:

(a) follow-up while running: A (prompt 2000) streams; once A has streamed >= k*128 + delta
    tokens, B = A's prompt + A's output so far + 20 new tokens is sent while A still runs.
    Islands: B's cached_tokens >= len(prompt) + k*128. Upstream: <= len(prompt) (baseline:
    2000 cached at 150 generated).
(b) a 3-turn conversation, each turn = previous prompt + previous output + 50 new user tokens:
    `after_finish` sends a turn when the previous one finished (both arms cover the previous
    output; baseline 2300/2350 and 2650/2700 with 300-token turns); `while_running` sends it as
    soon as the previous turn has streamed GEN tokens (islands cover >= floor(GEN/128)*128 of
    them, upstream only the previous prompt).
(c) every cold input (A, the first turns) gives the same output ids on both servers; so does every
    cache-hit serve (B, later turns), which on islands read decode-island KV.

Speculative decoding: `test_ngram_speculative_decoding_on_cpu` tries `--speculative-algorithm
NGRAM` with and without islands and skips with the server's own error when it does not boot. In
0.5.15.post1 no drafter runs on this CPU stack (found by hand, 2026-11-29):

- NGRAM: `ServerArgs` rejects it, `ValueError: Ngram speculative decoding only supports CUDA
  device.` (`arg_groups/speculative_hook.py:_handle_ngram`); past that, `ngram_worker.py` imports
  `sgl_kernel.speculative` (not installed on CPU) and pins its device to `cuda:<id>`.
- STANDALONE (EAGLE family, draft = a perturbed copy of the tiny model, topk 1, 3 steps):
  torch_native has no draft backend (`ValueError: EAGLE is not supported in decode attention
  backend torch_native`); with `--speculative-draft-attention-backend triton` and
  TRITON_INTERPRET=1 it boots, then the overlap scheduler dies on the first request
  (`RuntimeError: unknown parameter type` at `overlap_utils.py:245`, `record_stream` on the CPU
  stream); with `--disable-overlap-schedule`, `NameError: name 'sgl_build_tree_kernel_efficient'
  is not defined` (`eagle_utils.py:247`: CPU takes the CUDA branch; the Triton tree kernel is
  wired for XPU only); routing that to the Triton kernels by a runtime shim, the target verify
  forward fails `assert swa_loc is not None` (`swa_memory_pool.py:169`) for a hybrid-SWA target,
  with torch_native and with triton as the target backend.
The accumulated-progress cadence under variable accept lengths is covered on the real cache in
`test/engine/test_decode_islands.py` (MiniScheduler with random accept lengths).
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import time

import pytest

from islands_harness.client import fetch_metrics
from islands_harness.conversations import (
    LogScan,
    conversation,
    flush_cache_when_idle,
    follow_up_while_running,
    random_ids,
)
from islands_harness.provenance import code_version
from islands_harness.server import REPO_ROOT, ServerStartError, SglangServer

WINDOW = 32
CHUNK = 512
INTERVAL = CHUNK // 4  # the default --swa-islands-decode-interval
PAGE = 1
PROMPT_LEN = 2000
K, DELTA = 2, 8  # (a): B is sent at >= K*INTERVAL + DELTA generated tokens
GEN = 160  # (b): tokens per turn re-sent by the next turn
# (a) and (b) while_running: tokens A (a turn) may generate after B (the next turn) is sent; it is
# aborted once B returned (B's first token streamed). B must be served before they run out: the
# stream's lag plus B's round trip and prefill, which on the loaded 2-core CI machine outlasted 24
# tokens, and with two busy cores 200. Aborted outputs are compared on their common prefix.
RUN_ON = 1024  # the tiny model's context is 4096: turn 2 asks 2210 + 160 + 1024
USER = 50
TURNS = 3
REQUEST_TIMEOUT_S = 1200
SERVER_ARGS = [
    "--page-size", str(PAGE),
    "--chunked-prefill-size", str(CHUNK),
    "--max-total-tokens", "65536",
    "--swa-full-tokens-ratio", "0.25",
    "--max-running-requests", "16",
    "--enable-metrics",
    "--decode-log-interval", "1",
]
ARMS = {"upstream": [], "islands": ["--enable-swa-islands"]}
MEASUREMENTS = REPO_ROOT / ".work" / "server-decode-islands.json"


def log(msg: str) -> None:
    print(f"[decode-islands] {msg}", flush=True)


@dataclasses.dataclass
class ArmRun:
    follow_up: object  # decode_reuse.FollowUp
    convs: dict  # mode -> list[decode_reuse.Turn]
    decode_islands_metric: float | None
    log_decode_islands: int | None
    boot_s: float
    work_s: float
    log_path: str
    code_at_boot: dict


def run_arm(model, vocab_hi: int, arm: str) -> ArmRun:
    srv = SglangServer(model, SERVER_ARGS + ARMS[arm], boot_timeout_s=600)
    code = code_version()
    srv.start()
    try:
        scan = LogScan(srv.log_path)
        t0 = time.monotonic()
        rng = random.Random(20261129)
        prompt = random_ids(rng, PROMPT_LEN, vocab_hi)
        fu = follow_up_while_running(
            srv, prompt, k=K, delta=DELTA, interval=INTERVAL,
            a_max_new=K * INTERVAL + DELTA + RUN_ON, abort_a=True,
            b_new=random_ids(rng, 20, vocab_hi),
            timeout=REQUEST_TIMEOUT_S, log=lambda m: log(f"{arm}: {m}"))
        convs = {}
        for mode, seed in (("after_finish", 1), ("while_running", 2)):
            flush_cache_when_idle(srv)
            crng = random.Random(seed)
            first = random_ids(crng, PROMPT_LEN, vocab_hi)
            users = [random_ids(crng, USER, vocab_hi) for _ in range(TURNS - 1)]
            convs[mode] = conversation(srv, first, users, gen=GEN, mode=mode, run_on=RUN_ON,
                                       abort_previous=True,
                                       timeout=REQUEST_TIMEOUT_S,
                                       log=lambda m: log(f"{arm}: {m}"))
        work_s = time.monotonic() - t0
        time.sleep(0.5)
        metric = fetch_metrics(srv.base_url).value("sglang:swa_island_decode_inserts", default=None)
        stats = scan.stats()
    finally:
        srv.stop()
    return ArmRun(fu, convs, metric, stats.decode_islands, srv.boot_s, work_s, str(srv.log_path),
                  code)


@pytest.fixture(scope="module")
def runs():
    from islands_harness.tiny_model import build_tiny_model

    model = build_tiny_model(window=WINDOW)
    meta = json.loads((model / ".tiny_model_complete.json").read_text())
    out = {arm: run_arm(model, meta["real_vocab"], arm) for arm in ARMS}
    summary = {arm: {
        "boot_s": round(r.boot_s, 1), "work_s": round(r.work_s, 1), "log": r.log_path,
        "follow_up": {k: v for k, v in dataclasses.asdict(r.follow_up).items()
                      if not k.endswith("output_ids")},
        "conversations": {m: [t.row() for t in ts] for m, ts in r.convs.items()},
        "decode_islands_metric": r.decode_islands_metric,
        "decode_islands_log": r.log_decode_islands,
        "code_at_boot": r.code_at_boot,
    } for arm, r in out.items()}
    MEASUREMENTS.parent.mkdir(parents=True, exist_ok=True)
    MEASUREMENTS.write_text(json.dumps(summary, indent=1) + "\n")
    log(f"measurements: {MEASUREMENTS}")
    return out


def _floor_page(n: int) -> int:
    return n // PAGE * PAGE


# ---- (a) follow-up while running ---------------------------------------------------------------

@pytest.mark.server
def test_follow_up_was_sent_and_served_while_a_ran(runs):
    for arm, r in runs.items():
        fu = r.follow_up
        assert fu.generated_at_send >= K * INTERVAL + DELTA, (arm, fu.generated_at_send)
        assert fu.a_running_when_b_done, f"{arm}: A finished before B was served"
        assert fu.b_prompt_len == PROMPT_LEN + fu.generated_at_send + 20


@pytest.mark.server
def test_follow_up_hits_the_running_output_with_islands(runs):
    fu = runs["islands"].follow_up
    floor = _floor_page(PROMPT_LEN + K * INTERVAL)
    assert fu.b_cached_tokens >= floor, (fu.b_cached_tokens, floor)
    assert fu.b_cached_tokens <= fu.b_prompt_len - 1


@pytest.mark.server
def test_follow_up_hits_only_the_prompt_upstream(runs):
    fu = runs["upstream"].follow_up
    assert fu.b_cached_tokens <= PROMPT_LEN, fu.b_cached_tokens
    assert fu.b_cached_tokens >= PROMPT_LEN - WINDOW, fu.b_cached_tokens  # the prompt did hit


# ---- (b) multi-turn conversations --------------------------------------------------------------

@pytest.mark.server
def test_turn_after_finish_covers_the_previous_output_in_both_arms(runs):
    for arm, r in runs.items():
        for t in r.convs["after_finish"][1:]:
            assert t.prev_running_at_admit is False, (arm, t.turn)
            assert t.prev_output_covered >= GEN - 1, (arm, t.row())


@pytest.mark.server
def test_turn_while_running_covers_the_previous_output_only_with_islands(runs):
    floor = GEN // INTERVAL * INTERVAL
    assert floor > 0
    for arm, r in runs.items():
        for t in r.convs["while_running"][1:]:
            assert t.prev_running_at_admit, f"{arm} turn {t.turn}: previous turn had finished"
            if arm == "islands":
                assert t.prev_output_covered >= floor, (arm, t.row())
            else:
                assert t.cached_tokens <= t.prev_prompt_len, (arm, t.row())


@pytest.mark.server
def test_decode_islands_fired_only_on_the_islands_server(runs):
    r = runs["islands"]
    # (a) fires >= K before B, (b) while_running >= 1 per turn that reaches INTERVAL tokens
    assert r.decode_islands_metric is not None and r.decode_islands_metric >= K + TURNS, r
    assert r.log_decode_islands == r.decode_islands_metric
    assert runs["upstream"].decode_islands_metric is None
    assert runs["upstream"].log_decode_islands is None


# ---- (c) outputs equal the islands-off server's ------------------------------------------------

def _first_diff(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _served(r: ArmRun):
    """name -> (kind, input prompt len, output ids). A was aborted once B returned (its length
    depends on timing): its entry is the first K * INTERVAL + DELTA tokens, which it always
    streamed before B was sent. Turns keep the first GEN tokens (`conversation` cuts them)."""
    a_ids = r.follow_up.a_output_ids[:K * INTERVAL + DELTA]
    assert len(a_ids) == K * INTERVAL + DELTA, len(r.follow_up.a_output_ids)
    out = {"A": ("cold", r.follow_up.prompt_len, a_ids),
           "B": ("hit", r.follow_up.b_prompt_len, r.follow_up.b_output_ids)}
    for mode, ts in r.convs.items():
        for t in ts:
            out[f"{mode}/turn{t.turn}"] = ("cold" if t.turn == 1 else "hit", t.prompt_len,
                                           t.output_ids)
    return out


def _mismatches(runs, kind):
    up, isl = _served(runs["upstream"]), _served(runs["islands"])
    assert up.keys() == isl.keys()
    bad = {}
    for name, (k, plen, ids) in isl.items():
        if k != kind:
            continue
        ref = up[name][2]
        assert up[name][1] == plen, name  # identical inputs, or the comparison means nothing
        assert ids and len(ids) == len(ref), name
        if ids != ref:
            i = _first_diff(ids, ref)
            bad[name] = {"first_diff": i, "islands": ids[i:i + 4], "upstream": ref[i:i + 4]}
    return bad


@pytest.mark.server
def test_cold_outputs_equal_the_islands_off_server(runs):
    bad = _mismatches(runs, "cold")
    assert not bad, f"cold serves differ between islands and upstream: {bad}"


@pytest.mark.server
def test_cache_hit_outputs_equal_the_islands_off_server(runs):
    """B and the later turns: on islands their prefix KV comes from decode islands (and more of it
    than upstream's), so the computed suffix differs; fp32 CPU keeps the argmaxes identical."""
    bad = _mismatches(runs, "hit")
    assert not bad, f"cache-hit serves differ between islands and upstream: {bad}"


# ---- speculative decoding ----------------------------------------------------------------------

NGRAM_ARGS = ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8",
              "--speculative-ngram-max-bfs-breadth", "1"]


def _boot_error(err: ServerStartError) -> str:
    """The last exception line of the server log tail in a ServerStartError."""
    lines = [ln for ln in str(err).splitlines() if re.match(r"^\w+(\.\w+)*(Error|Exception): ", ln)]
    return lines[-1] if lines else str(err).splitlines()[0]


@pytest.mark.server
@pytest.mark.parametrize("arm", list(ARMS))
def test_ngram_speculative_decoding_on_cpu(arm):
    """NGRAM drafts from the request's own tokens, so a repetitive prompt gives variable accept
    lengths. Where it boots: decode islands must fire (accumulated-progress cadence) and the
    outputs must equal the same server without speculative decoding. Where it does not boot
    (0.5.15.post1 on CPU: `_handle_ngram` rejects every non-CUDA device), skip with the error."""
    from islands_harness.tiny_model import build_tiny_model

    model = build_tiny_model(window=WINDOW)
    vocab_hi = json.loads((model / ".tiny_model_complete.json").read_text())["real_vocab"]
    rng = random.Random(7)
    motif = random_ids(rng, 40, vocab_hi)
    prompt = (motif * 13)[:500]
    n_new = 3 * INTERVAL + 16
    srv = SglangServer(model, SERVER_ARGS + ARMS[arm] + NGRAM_ARGS, boot_timeout_s=600)
    try:
        srv.start()
    except ServerStartError as e:
        reason = _boot_error(e)
        log(f"NGRAM ({arm}) did not boot: {reason}")
        if "only supports CUDA device" in reason:
            pytest.skip(f"NGRAM speculative decoding does not run on CPU in sglang 0.5.15.post1: "
                        f"{reason}")
        raise
    try:
        scan = LogScan(srv.log_path)
        spec = srv.generate(prompt, n_new, timeout=REQUEST_TIMEOUT_S)
        time.sleep(0.5)
        stats = scan.stats()
        decode_islands = fetch_metrics(srv.base_url).value("sglang:swa_island_decode_inserts", default=None)
    finally:
        srv.stop()
    with SglangServer(model, SERVER_ARGS + ARMS[arm], boot_timeout_s=600) as ref_srv:
        ref = ref_srv.generate(prompt, n_new, timeout=REQUEST_TIMEOUT_S)
    assert spec.output_ids == ref.output_ids, _first_diff(spec.output_ids, ref.output_ids)
    assert len(set(stats.accept_lens)) > 1, stats.accept_lens  # variable accept lengths
    if arm == "islands":
        assert decode_islands is not None and decode_islands >= 3, decode_islands
