"""Without --enable-swa-islands, a --swa-full-tokens-ratio lowered below upstream's default whose
SWA pool binds SWARadixCache admission below the request pool is reported at startup, with a
ratio that removes the bind (the coupled rollback: the ratio moves back with the flag)."""

import logging
import unittest

from sglang.test.ci.ci_register import register_cpu_ci

try:
    from sglang.test.test_utils import CustomTestCase
except ImportError:  # test_utils needs the benchmark extras (e.g. datasets)
    CustomTestCase = unittest.TestCase

from swa_islands_stack import build_stack  # beside this file

register_cpu_ci(est_time=10, suite="base-a-test-cpu")

GUARD_LOGGER = "sglang.srt.mem_cache.swa_island_guard"


class TestRollbackRatioWarning(CustomTestCase):
    def build(self, **kw):
        """The stack, and what the startup checks logged while building it."""
        with self.assertLogs(GUARD_LOGGER, level=logging.WARNING) as logs:
            logging.getLogger(GUARD_LOGGER).warning("sentinel")  # assertLogs needs one record
            stack = build_stack(**kw)
        return stack, [r.getMessage() for r in logs.records if r.getMessage() != "sentinel"]

    def test_lowered_ratio_that_binds_admission_is_reported(self):
        # 16 requests x one 256-token chunk each need 4096 SWA tokens; the pool has 1024
        _, messages = self.build(islands=False, chunk=256, swa_pool=1024, max_reqs=16, ratio=0.5)
        self.assertEqual(len(messages), 1, messages)
        self.assertIn("binds admission at about 4.0 running requests", messages[0])
        self.assertIn("If islands were just turned off (rollback)", messages[0])
        self.assertIn("--swa-full-tokens-ratio 0.25", messages[0])  # 4096 of 16384 tokens

    def test_pool_that_admits_the_request_pool_is_not_reported(self):
        _, messages = self.build(islands=False, chunk=256, swa_pool=8192, max_reqs=16, ratio=0.5)
        self.assertEqual(messages, [])

    def test_default_ratio_is_not_reported(self):
        _, messages = self.build(islands=False, chunk=256, swa_pool=1024, max_reqs=16, ratio=0.8)
        self.assertEqual(messages, [])

    def test_islands_on_report_the_island_floor_instead(self):
        _, messages = self.build(islands=True, chunk=256, swa_pool=1024, max_reqs=16, ratio=0.5)
        self.assertFalse(any("rollback" in m for m in messages), messages)


if __name__ == "__main__":
    unittest.main()
