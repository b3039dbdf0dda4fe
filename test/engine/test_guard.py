"""Bad input gets a clear error and loses nothing: where islands may not run, pool floors,
the coupled-rollback warning, and the exact type checks (registry, kv_canary walker). The pool
formulas behind the floors and the suggested ratios are pinned with hand-computed numbers."""

import logging

import pytest

from islands_harness.sim import MiniScheduler, random_prompt
from islands_harness.stack import build_stack, env_overrides, laguna_config_dir
from sglang.srt.mem_cache import swa_island_formulas as formulas
from sglang.srt.mem_cache import swa_island_guard as guard
from sglang.srt.mem_cache.swa_island_guard import (
    admission_bind,
    check_swa_islands_cache,
    hold_without_islands,
    island_capacity,
    island_floor,
    ratio_for_swa_pool,
    swa_pool_tokens,
)
from sglang.srt.server_args import ServerArgs


def server_args(**kw):
    return ServerArgs(
        model_path=laguna_config_dir(32),
        device="cpu",
        attention_backend="torch_native",
        skip_tokenizer_init=True,
        **kw,
    )


@pytest.mark.parametrize(
    "flags, needle",
    [
        (dict(disable_radix_cache=True), "--disable-radix-cache"),
        (dict(enable_hierarchical_cache=True), "--enable-hierarchical-cache"),
        (dict(radix_cache_backend="mine"), "--radix-cache-backend"),
        (dict(enable_streaming_session=True), "--enable-streaming-session"),
        (dict(disable_hybrid_swa_memory=True), "--disable-hybrid-swa-memory"),
    ],
)
def test_flag_combinations_without_swa_radix_cache_are_rejected_at_startup(flags, needle):
    with pytest.raises(ValueError) as e:
        server_args(enable_swa_islands=True, **flags)
    assert "--enable-swa-islands" in str(e.value) and needle in str(e.value)
    server_args(enable_swa_islands=False, **flags)  # the same flags alone are fine


@pytest.mark.parametrize(
    "mode, reason",
    [
        # the decode server's cache is SWAChunkCache: the PD hook forces --disable-radix-cache,
        # and the refusal must name disaggregation, not a flag the operator never gave
        ("decode", "builds SWAChunkCache on the decode server (no radix tree"),
        # the prefill server's transfer reads the last SWA window of each request
        ("prefill", "islands on that path are not verified with any transfer backend"),
    ],
)
def test_pd_disaggregation_is_refused_in_either_mode_with_its_reason(mode, reason):
    """docs/DISAGGREGATION.md: what each side's cache is and why islands are refused there."""
    with pytest.raises(ValueError) as e:
        server_args(enable_swa_islands=True, disaggregation_mode=mode)
    message = str(e.value)
    assert message.startswith("--enable-swa-islands cannot be used here: ")
    assert f"--disaggregation-mode {mode}" in message and reason in message
    assert "--disable-radix-cache builds" not in message
    # the same mode without islands boots as stock does
    assert server_args(enable_swa_islands=False, disaggregation_mode=mode).disaggregation_mode == mode


@pytest.mark.parametrize("env", ["SGLANG_ENABLE_UNIFIED_RADIX_TREE", "SGLANG_EXPERIMENTAL_CPP_RADIX_TREE"])
def test_environment_switches_to_other_trees_are_rejected(env):
    with env_overrides({env: "1"}):
        with pytest.raises(ValueError, match=env):
            server_args(enable_swa_islands=True)


def test_invalid_ratio_values_get_upstreams_message():
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="swa-full-tokens-ratio"):
            server_args(enable_swa_islands=True, swa_full_tokens_ratio=bad)


def test_exact_type_check_rejects_the_base_class_and_non_hybrid_models():
    upstream = build_stack(islands=False).tree
    with pytest.raises(ValueError, match="SWARadixCache"):
        check_swa_islands_cache(upstream, is_hybrid_swa=True)
    with pytest.raises(ValueError, match="not a hybrid sliding-window model"):
        check_swa_islands_cache(upstream, is_hybrid_swa=False)
    check_swa_islands_cache(build_stack(islands=True).tree, is_hybrid_swa=True)


# ------------------------------------------------------------------------ the pool formulas
# The seed deployment: w = 1024, p = 64, cp = 16384, N = 48, T = 1,030,912 at ratio 0.17.


def test_island_floor_is_one_chunk_plus_an_island_per_request():
    assert island_floor(48, 1024, 64, 16384) == 68_608  # 16384 + 48 * 1088
    assert island_floor(1, 33, 1, 128) == 162  # 128 + 33 + 1
    assert island_floor(0, 1024, 64, 16384) == 16_384
    # two chunks in flight, a decode tail of 1088: 2 * 16384 + 48 * (1024 + 64 + 1088)
    assert island_floor(48, 1024, 64, 16384, chunks_in_flight=2, decode_tail=1088) == 137_216


def test_island_capacity_is_the_most_requests_whose_floor_fits():
    assert island_capacity(175_232, 1024, 64, 16384) == 146  # (175232 - 16384) / 1088 = 146.0
    assert island_capacity(175_231, 1024, 64, 16384) == 145
    # (175232 - 32768) // 2176 = 65 (65.47)
    assert island_capacity(175_232, 1024, 64, 16384, chunks_in_flight=2, decode_tail=1088) == 65
    assert island_capacity(16_000, 1024, 64, 16384) == 0  # below one chunk: none


def test_hold_without_islands_is_one_chunk_in_whole_pages():
    assert hold_without_islands(1024, 64, 16384) == 16_384
    assert hold_without_islands(1024, 64, 16384, worst_case=True) == 17_408  # 16384 + 1024
    assert hold_without_islands(1000, 64, 1000) == 1_024  # 1000 -> 16 pages
    assert hold_without_islands(1000, 64, 1000, worst_case=True) == 2_048  # 2000 -> 32 pages
    assert hold_without_islands(32, 1, 1) == 1  # a one-token chunk is valid


def test_admission_bind_is_the_pool_over_the_hold():
    assert admission_bind(175_232, 16_384) == 10.6953125
    assert admission_bind(1_000, 128) == 7.8125
    assert admission_bind(0, 128) == 0.0


def test_swa_pool_is_the_ratio_of_the_index_space_floored_to_a_page():
    assert swa_pool_tokens(1_030_912, 0.17, 64) == 175_232  # int(175255.04) = 175255 -> 2738 pages
    assert swa_pool_tokens(737_920, 0.32, 64) == 236_096  # int(236134.4) -> 3689 pages
    assert swa_pool_tokens(100, 0.29, 1) == 28  # 100 * 0.29 = 28.999999999999996 in floats


def test_ratio_for_swa_pool_is_the_smallest_hundredth_that_holds_the_need():
    assert ratio_for_swa_pool(2_048, 16_384, 1) == 0.13  # 0.125 -> 0.13: 2129 tokens
    assert ratio_for_swa_pool(162, 1_000, 1) == 0.17  # 0.162 -> 0.17: 170 tokens
    # 0.13 gives int(2129.92) = 2129 -> 2112 at p = 64, short of 2120; 0.14 gives 2240.
    assert ratio_for_swa_pool(2_120, 16_384, 64) == 0.14
    # The seed's serving floor at the seed's T: 0.1331 -> 0.14 (0.13: 133,952 < 137,216; 0.14: 144,320).
    assert ratio_for_swa_pool(137_216, 1_030_912, 64) == 0.14
    # Rounds as SGLang does: 0.29 of 100 tokens is 28 tokens in floats, so 29 needs 0.30.
    assert ratio_for_swa_pool(29, 100, 1) == 0.30
    assert ratio_for_swa_pool(0, 100, 1) == 0.01
    assert ratio_for_swa_pool(20_000, 16_384, 1) == 1.0  # more than the index space


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: island_floor(-1, 1024, 64, 16384), "n_running"),
        (lambda: island_floor(1, 0, 64, 16384), "window"),
        (lambda: island_capacity(100, 1024, 0, 16384), "page"),
        (lambda: hold_without_islands(1024, 64, 0), "chunk"),
        (lambda: admission_bind(100, 0), "hold"),
        (lambda: admission_bind(1.5, 10), "swa_pool"),
        (lambda: swa_pool_tokens(1000, 1.5, 1), "ratio"),
        (lambda: ratio_for_swa_pool(10, 0, 1), "full_tokens"),
    ],
)
def test_pool_formulas_reject_bad_input_in_their_own_terms(call, name):
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value).startswith(name) and "--" not in str(e.value)


# ------------------------------------------------------------------------ the startup checks


def test_ratio_below_the_island_floor_is_a_startup_error():
    # one chunk (128) + window (33) + page (1) = 162 SWA tokens needed for a single request
    with pytest.raises(ValueError, match=r"island floor of a single request \(162 tokens"):
        build_stack(window=32, chunk=128, swa_pool=150, ratio=0.05)
    build_stack(window=32, chunk=128, swa_pool=162, ratio=0.05)


def test_rollback_with_the_lean_ratio_warns_with_the_numbers(caplog):
    caplog.set_level(logging.WARNING)
    # islands off, lean ratio: 16 requests x one chunk (128) held > 1000-token SWA pool
    build_stack(window=32, chunk=128, swa_pool=1000, full_pool=16384, islands=False, ratio=0.06)
    msg = " ".join(r.getMessage() for r in caplog.records)
    assert "binds admission at about 7.8 running requests" in msg
    assert "--swa-full-tokens-ratio 0.13" in msg
    caplog.clear()
    build_stack(window=32, chunk=128, swa_pool=1000, full_pool=16384, islands=True, ratio=0.06)
    assert "binds admission" not in " ".join(r.getMessage() for r in caplog.records)


def test_pool_below_the_concurrency_floor_warns_with_the_requests_it_carries(caplog):
    """README: with islands, a pool below the floor of the request pool's concurrency starts, with
    a warning naming how many requests it carries: (1000 - 128) // 34 = 25 < 32 requests."""
    caplog.set_level(logging.WARNING)
    build_stack(window=32, chunk=128, swa_pool=1000, full_pool=16384, max_reqs=32, ratio=0.06)
    msg = " ".join(r.getMessage() for r in caplog.records)
    assert "carries about 25 running requests" in msg and "fewer than the request pool's 32" in msg
    assert "island floor (128 + N x 34 tokens)" in msg  # chunk + N x (w + p), w 33, p 1
    caplog.clear()
    # (1000 - 128) // 34 = 25 >= 16: no warning
    build_stack(window=32, chunk=128, swa_pool=1000, full_pool=16384, max_reqs=16, ratio=0.06)
    assert "carries about" not in " ".join(r.getMessage() for r in caplog.records)


def test_floor_error_suggests_the_smallest_ratio_that_holds_one_request():
    # floor 162 tokens (128 + 33 + 1) of a 1000-token index space: 0.162 -> 0.17 (170 tokens)
    with pytest.raises(ValueError, match=r"Raise --swa-full-tokens-ratio to at least 0\.17\.$"):
        build_stack(window=32, chunk=128, swa_pool=161, full_pool=1000, ratio=0.05)


def test_both_suggested_ratios_come_from_ratio_for_swa_pool(monkeypatch, caplog):
    calls = []

    def fake(need, full_tokens, page):
        calls.append((need, full_tokens, page))
        return 0.77

    monkeypatch.setattr(guard, "ratio_for_swa_pool", fake)  # the rollback warning's
    monkeypatch.setattr(formulas, "ratio_for_swa_pool", fake)  # island_pool_check's
    with pytest.raises(ValueError, match=r"at least 0\.77"):
        build_stack(window=32, chunk=128, swa_pool=161, full_pool=1000, ratio=0.05)
    caplog.set_level(logging.WARNING)
    build_stack(window=32, chunk=128, swa_pool=1000, full_pool=16384, islands=False, ratio=0.06)
    assert "e.g. --swa-full-tokens-ratio 0.77" in " ".join(r.getMessage() for r in caplog.records)
    # the floor of one request; then the request pool (16) x one chunk (128)
    assert calls == [(162, 1000, 1), (16 * 128, 16384, 1)]


def test_the_cache_and_the_guard_re_export_the_shared_formulas():
    """The formulas are defined once for both targets (swa_island_formulas, which the 0.5.23
    target installs as it is); the 0.5.15 cache and guard re-export the same objects."""
    from sglang.srt.mem_cache import swa_island_radix_cache as cache

    for name in ("swa_tombstone_frontier", "decode_island_interval", "decode_island_due",
                 "island_out_of_window", "reclaim_watermark", "RECLAIM_POLICIES",
                 "DEFAULT_DECODE_ISLAND_INTERVAL"):
        assert getattr(cache, name) is getattr(formulas, name), name
    for name in ("swa_pool_tokens", "island_floor", "island_capacity", "hold_without_islands",
                 "admission_bind", "ratio_for_swa_pool", "RATIO_STEP", "island_pool_check"):
        assert getattr(guard, name) is getattr(formulas, name), name


def test_both_targets_guards_take_the_pool_verdict_from_island_pool_check():
    """One pool-floor check: the 0.5.15 guard and the 0.5.23 one (python-main/, not importable
    here) call swa_island_formulas.island_pool_check and compute no floor of their own."""
    import ast
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    for path in (repo / "python/sglang/srt/mem_cache/swa_island_guard.py",
                 repo / "python-main/sglang/srt/mem_cache/swa_island_guard.py"):
        calls = {n.func.id for n in ast.walk(ast.parse(path.read_text()))
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert "island_pool_check" in calls, path
        assert not calls & {"island_floor", "island_capacity"}, path


def test_kv_canary_walker_accepts_the_island_cache_and_skips_tombstones():
    import random

    from sglang.srt.kv_canary.radix_cache_walker import walk_radix_cache_for_canary

    stack = build_stack(window=32, chunk=128)
    sched = MiniScheduler(stack)
    sched.submit("a", random_prompt(random.Random(0), 500), 8)
    sched.run()
    full = walk_radix_cache_for_canary(radix_cache=stack.tree)
    resident = walk_radix_cache_for_canary(radix_cache=stack.tree, swa_resident_only=True)
    total, live = stack.tree.total_size()
    assert full.slot_indices.numel() == total
    assert resident.slot_indices.numel() == live < total
