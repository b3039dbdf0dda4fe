"""The prefix tokens the SWA cut from a hit (patch "observability: count the prefix tokens the SWA
cut from a hit"): a request matching into a committed prompt whose SWA the commits freed hits
only where a window ends, though the full-attention KV runs to its divergence. The difference is
recorded per match (``Req.swa_cut_len``), reported in ``cached_tokens_details["swa_cut"]`` and
counted in ``sglang:swa_cut_tokens_total``; both tree cores."""

import sys
import unittest
from array import array
from functools import partial
from pathlib import Path
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sglang.srt.managers.schedule_batch import Req
from sglang.srt.managers.scheduler_components.output_streamer import (
    SchedulerOutputStreamer,
)
from sglang.srt.mem_cache.common import match_kv_cache
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from sglang.srt.observability.metrics_collector import TokenizerMetricsCollector
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.test.ci.ci_register import register_cpu_ci

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mem_cache"))
from swa_islands_stack import (  # noqa: E402  (the stack beside the mem_cache tests)
    TREE_CORES,
    build_params,
    commit_chunk,
    make_prefilling_req,
)

register_cpu_ci(est_time=5, suite="base-a-test-cpu")

CHUNK = 64
PROMPT = list(range(10, 10 + 3 * CHUNK))
DIVERGE_AT = (
    CHUNK + 36
)  # inside the second chunk: its SWA was freed at the third commit


def waiting_req(ids, rid="b") -> Req:
    return Req(
        rid=rid,
        origin_input_text="",
        origin_input_ids=array("q", ids),
        sampling_params=SamplingParams(temperature=0, max_new_tokens=1),
    )


class TestSwaCutLen(unittest.TestCase):
    def test_the_match_records_full_attention_kv_past_the_hit(self):
        for core in TREE_CORES:
            with self.subTest(core=core):
                cache = UnifiedRadixCache(build_params(tree_core_backend=core))
                req = make_prefilling_req(cache, PROMPT)
                for k in (1, 2, 3):
                    commit_chunk(cache, req, k * CHUNK)
                branch = waiting_req(PROMPT[:DIVERGE_AT] + [5] * 20)
                result = match_kv_cache(branch, cache)
                self.assertEqual(result.full_kv_hit_length, DIVERGE_AT)
                hit = branch.prefix_len + branch.host_hit_length
                self.assertLess(hit, DIVERGE_AT)  # cut back to where a window ends
                self.assertEqual(branch.swa_cut_len, DIVERGE_AT - hit)
                # a match that reaches the end of the Full KV has nothing cut
                same = waiting_req(PROMPT[: CHUNK * 3] + [5])
                match_kv_cache(same, cache)
                self.assertEqual(same.swa_cut_len, 0)
                self.assertEqual(same.prefix_len, CHUNK * 3)

    def test_no_cut_without_a_hit_in_the_tree(self):
        cache = UnifiedRadixCache(build_params())
        fresh = waiting_req([7, 8, 9, 10])
        match_kv_cache(fresh, cache)
        self.assertEqual(fresh.swa_cut_len, 0)


class TestSwaCutReported(unittest.TestCase):
    def details(self, **counts):
        req = waiting_req([1, 2, 3])
        for k, v in counts.items():
            setattr(req, k, v)
        streamer = SimpleNamespace(enable_hicache_storage=lambda: False)
        return SchedulerOutputStreamer.get_cached_tokens_details(streamer, req)

    def test_cached_tokens_details_carry_the_cut(self):
        self.assertEqual(
            self.details(cached_tokens_device=60, cached_tokens_swa_cut=40),
            {"device": 60, "host": 0, "swa_cut": 40},
        )
        # a hit the SWA cut to nothing is still reported
        self.assertEqual(
            self.details(cached_tokens_swa_cut=100),
            {"device": 0, "host": 0, "swa_cut": 100},
        )
        self.assertEqual(
            self.details(cached_tokens_device=60), {"device": 60, "host": 0}
        )
        self.assertIsNone(self.details())

    def test_the_counter_adds_each_finished_requests_cut(self):
        registry = CollectorRegistry()

        class Collector(
            TokenizerMetricsCollector
        ):  # prometheus metrics on a private registry
            _counter_cls = partial(Counter, registry=registry)
            _gauge_cls = partial(Gauge, registry=registry)
            _histogram_cls = partial(Histogram, registry=registry)

        labels = {"model_name": "m"}
        collector = Collector(labels=labels)
        for cached, details in (
            (0, {"device": 0, "host": 0, "swa_cut": 100}),
            (60, {"device": 60, "host": 0, "swa_cut": 40}),
            (60, {"device": 60, "host": 0}),
            (0, None),
        ):
            collector.observe_one_finished_request(
                labels,
                prompt_tokens=200,
                generation_tokens=4,
                cached_tokens=cached,
                e2e_latency=0.1,
                has_grammar=False,
                cached_tokens_details=details,
            )
        self.assertEqual(
            registry.get_sample_value("sglang:swa_cut_tokens_total", labels), 140
        )
        self.assertEqual(
            registry.get_sample_value(
                "sglang:cached_tokens_total", {**labels, "cache_source": "device"}
            ),
            120,
        )


if __name__ == "__main__":
    unittest.main()
