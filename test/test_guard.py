"""Bad input gets a clear error and loses nothing: where islands may not run, pool floors,
the coupled-rollback warning, and the exact type checks (registry, kv_canary walker)."""

import logging

import pytest

from islands_harness.sim import MiniScheduler, random_prompt
from islands_harness.stack import build_stack, env_overrides, laguna_config_dir
from sglang.srt.mem_cache.swa_island_guard import check_swa_islands_cache
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
