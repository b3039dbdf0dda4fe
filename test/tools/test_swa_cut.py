"""islands_tools.swa_cut: the share of full-attention hits the SWA cut, read from /metrics text
with the harness's own parser, and what it suggests (scripts/swa_pool_plan.py --metrics-url)."""

import pytest

from islands_harness.client import Metrics
from islands_tools import swa_cut
from islands_tools.pool_plan_cli import main as plan_main

TEXT = """\
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{cache_source="device",model_name="m"} 700.0
sglang:cached_tokens_total{cache_source="host",model_name="m"} 100.0
# TYPE sglang:swa_cut_tokens_total counter
sglang:swa_cut_tokens_total{model_name="m"} 200.0
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{is_streaming="false",model_name="m"} 3000.0
"""


def reading(text=TEXT):
    return swa_cut.SwaCutReading.from_metrics(Metrics.parse(text))


def test_the_cut_share_is_of_the_hits_the_full_attention_cache_held():
    r = reading()
    assert (r.cached_device, r.cached_host, r.swa_cut, r.prompt) == (700, 100, 200, 3000)
    assert r.cut_share == pytest.approx(200 / 1000)


def test_advice_by_share():
    assert "raise the ratio: try --swa-full-tokens-ratio 0.21" in swa_cut.advice(reading(), 0.17)
    assert "give --current-ratio" in swa_cut.advice(reading())
    low = reading(TEXT.replace("} 200.0", "} 10.0"))
    assert "costs no measurable hits" in swa_cut.advice(low)
    mid = reading(TEXT.replace("} 200.0", "} 50.0"))
    assert "islands" in swa_cut.advice(mid) and "raise" not in swa_cut.advice(mid)
    none = reading(TEXT.replace("700.0", "0.0").replace("100.0", "0.0").replace("} 200.0", "} 0.0"))
    assert none.cut_share is None and "nothing to suggest" in swa_cut.advice(none)


def test_the_suggested_ratio_keeps_the_lost_windows_first_order():
    assert swa_cut.suggested_ratio(0.15, 0.17) == 0.2
    assert swa_cut.suggested_ratio(0.0, 0.17) == 0.17
    assert swa_cut.suggested_ratio(0.9, 0.5) == 1.0
    with pytest.raises(ValueError):
        swa_cut.suggested_ratio(1.0, 0.17)


def test_a_server_without_the_counter_is_named():
    stock = "\n".join(ln for ln in TEXT.splitlines() if "swa_cut" not in ln)
    with pytest.raises(ValueError, match="patch 0015"):
        reading(stock)


def test_the_planner_reports_an_unreachable_server_clearly(capsys):
    with pytest.raises(SystemExit):
        plan_main(["--metrics-url", "http://127.0.0.1:9"])
    assert "--metrics-url http://127.0.0.1:9" in capsys.readouterr().err
