"""--enable-swa-islands (default off), --swa-islands-reclaim and --swa-islands-decode-interval:
parsed as server arguments, and every combination the island path does not cover refused at
startup with the reason (handle_swa_islands, run after handle_cache_compatibility)."""

import argparse
import contextlib
import io
import unittest
from types import SimpleNamespace

from sglang.srt.arg_groups.overrides import resolving_view
from sglang.srt.arg_groups.pd_disaggregation_hook import handle_pd_disaggregation
from sglang.srt.arg_groups.resolution_hooks import run_hook
from sglang.srt.arg_groups.swa_islands_hook import (
    FREE_OUT_OF_WINDOW_ENV,
    handle_swa_islands,
    swa_islands_conflict,
)
from sglang.srt.server_args import ServerArgs, _defaults
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=10, suite="base-a-test-cpu")

# Each refused combination: the arguments that make it, and the flag the reason names.
UNSUPPORTED = [
    ({"disable_radix_cache": True}, "--disable-radix-cache"),
    ({"disable_hybrid_swa_memory": True}, "--disable-hybrid-swa-memory"),
    ({"radix_cache_backend": "mine"}, "--radix-cache-backend='mine'"),
    (
        {"enable_hierarchical_cache": True, "hicache_storage_backend": "file"},
        "--enable-hierarchical-cache with --hicache-storage-backend file",
    ),
    (
        {"enable_hierarchical_cache": True, "hicache_host_memory_mode": "buffer_only"},
        "--enable-hierarchical-cache with --hicache-host-memory-mode buffer_only",
    ),
    ({"enable_lmcache": True}, "--enable-lmcache"),
    ({"enable_flexkv": True}, "--enable-flexkv"),
    (
        {"enable_unified_cache_external_linker": True},
        "--enable-unified-cache-external-linker",
    ),
    ({"enable_session_radix_cache": True}, "--enable-session-radix-cache"),
    ({"enable_streaming_session": True}, "--enable-streaming-session"),
    ({"enable_unified_memory": True}, "--enable-unified-memory"),
    (
        {"enable_decoder_swa_bounded_replay": True},
        "--enable-decoder-swa-bounded-replay",
    ),
    ({"disaggregation_mode": "prefill"}, "--disaggregation-mode prefill"),
    ({"disaggregation_mode": "decode"}, "--disaggregation-mode decode"),
]


def args(**overrides):
    """Server arguments at their defaults, with ``overrides``."""
    return SimpleNamespace(**{**_defaults, **overrides})


def quiet():
    """Swallow argparse's usage message on stderr."""
    return contextlib.redirect_stderr(io.StringIO())


def parse(*argv):
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return parser.parse_args(["--model-path", "m", *argv])


class TestSwaIslandsFlags(unittest.TestCase):
    def test_islands_are_off_by_default(self):
        a = parse()
        self.assertFalse(a.enable_swa_islands)
        self.assertIsNone(
            a.swa_islands_reclaim
        )  # the cache picks the eviction order's default
        self.assertIsNone(a.swa_islands_decode_interval)

    def test_the_three_flags_parse(self):
        a = parse(
            "--enable-swa-islands",
            "--swa-islands-reclaim",
            "eager",
            "--swa-islands-decode-interval",
            "64",
        )
        self.assertTrue(a.enable_swa_islands)
        self.assertEqual(a.swa_islands_reclaim, "eager")
        self.assertEqual(a.swa_islands_decode_interval, 64)

    def test_an_unknown_reclaim_policy_is_an_argument_error(self):
        with self.assertRaises(SystemExit), quiet():
            parse("--swa-islands-reclaim", "sometimes")


class TestSwaIslandsRefusals(unittest.TestCase):
    def test_the_default_configuration_is_covered(self):
        self.assertIsNone(swa_islands_conflict(args(), {}))
        handle_swa_islands(args(enable_swa_islands=True), environ={})

    def test_a_hicache_host_tier_is_covered_under_either_write_policy(self):
        """Islands compose with HiCache's host tier (cache mode, no L3 store) under every
        eviction order and either write policy."""
        for policy in ("write_through", "write_back"):
            for eviction in ("auto", "lru", "window"):
                with self.subTest(policy=policy, eviction=eviction):
                    cfg = args(
                        enable_swa_islands=True,
                        enable_hierarchical_cache=True,
                        hicache_write_policy=policy,
                        swa_islands_eviction=eviction,
                    )
                    self.assertIsNone(swa_islands_conflict(cfg, {}))
                    handle_swa_islands(cfg, environ={})

    def test_every_unsupported_combination_is_refused_with_its_reason(self):
        for overrides, named in UNSUPPORTED:
            with self.subTest(named=named):
                with self.assertRaisesRegex(
                    ValueError, "--enable-swa-islands cannot be used here"
                ) as cm:
                    handle_swa_islands(
                        args(enable_swa_islands=True, **overrides), environ={}
                    )
                self.assertIn(named, str(cm.exception))
                self.assertIn("Drop one of the two.", str(cm.exception))

    def test_pd_disaggregation_is_refused_after_the_pd_hook_with_its_own_reason(self):
        """In pipeline order: handle_pd_disaggregation resolves --disable-radix-cache on a
        decode server first, and the refusal must still name disaggregation and why, not a
        flag the operator never gave."""
        reasons = {
            "decode": "builds a disabled UnifiedRadixCache on the decode server",
            "prefill": "islands on that path are not verified with any transfer backend",
        }
        for mode, reason in reasons.items():
            with self.subTest(mode=mode):
                server_args = ServerArgs(
                    model_path="m", enable_swa_islands=True, disaggregation_mode=mode
                )
                run_hook(handle_pd_disaggregation, server_args)
                if mode == "decode":
                    self.assertTrue(resolving_view(server_args).disable_radix_cache)
                with self.assertRaises(ValueError) as cm:
                    handle_swa_islands(server_args, environ={})
                message = str(cm.exception)
                self.assertIn(f"--disaggregation-mode {mode}", message)
                self.assertIn(reason, message)
                self.assertNotIn("--disable-radix-cache builds", message)
                # without the flag the same server resolves as stock
                stock = ServerArgs(model_path="m", disaggregation_mode=mode)
                run_hook(handle_pd_disaggregation, stock)
                handle_swa_islands(stock, environ={})

    def test_main_free_out_of_window_switch_set_explicitly_is_refused(self):
        for value in ("0", "1"):
            with self.subTest(value=value):
                with self.assertRaisesRegex(ValueError, FREE_OUT_OF_WINDOW_ENV):
                    handle_swa_islands(
                        args(enable_swa_islands=True),
                        environ={FREE_OUT_OF_WINDOW_ENV: value},
                    )

    def test_a_decode_interval_below_one_token_is_refused(self):
        for interval in (0, -4):
            with self.subTest(interval=interval):
                with self.assertRaisesRegex(ValueError, "at least 1 token"):
                    handle_swa_islands(
                        args(
                            enable_swa_islands=True,
                            swa_islands_decode_interval=interval,
                        ),
                        environ={},
                    )
        handle_swa_islands(
            args(enable_swa_islands=True, swa_islands_decode_interval=1), environ={}
        )

    def test_an_unknown_eviction_order_is_refused(self):
        with self.assertRaisesRegex(
            ValueError, "--swa-islands-eviction must be one of auto, lru, window"
        ):
            handle_swa_islands(
                args(enable_swa_islands=True, swa_islands_eviction="fifo"), environ={}
            )
        handle_swa_islands(
            args(enable_swa_islands=True, swa_islands_eviction="window"), environ={}
        )

    def test_without_the_flag_nothing_is_refused(self):
        for overrides, _ in UNSUPPORTED:
            with self.subTest(overrides=overrides):
                handle_swa_islands(
                    args(**overrides), environ={FREE_OUT_OF_WINDOW_ENV: "0"}
                )

    def test_the_default_settings_without_the_flag_say_nothing(self):
        with self.assertNoLogs("sglang.srt.arg_groups.swa_islands_hook", "WARNING"):
            handle_swa_islands(args(), environ={})

    def test_island_settings_without_the_flag_only_warn(self):
        for overrides in (
            {"swa_islands_reclaim": "eager"},
            {"swa_islands_reclaim": "lazy"},
            {"swa_islands_decode_interval": 0},
            {"swa_islands_eviction": "window"},
        ):
            with self.subTest(overrides=overrides):
                with self.assertLogs(
                    "sglang.srt.arg_groups.swa_islands_hook", "WARNING"
                ) as logs:
                    handle_swa_islands(args(**overrides), environ={})
                self.assertIn(
                    "take effect only with --enable-swa-islands", logs.output[0]
                )


if __name__ == "__main__":
    unittest.main()
