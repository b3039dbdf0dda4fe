"""benchmarks/trace_replay.py: a production trace replayed at its arrival times on each arm's real
tree cache and admission, in model time. Here at a scaled shape: the conversation trace's first
120 requests with lengths / 16 (block 32), w 64, p 4, cp 1024, cap 8, the planner's pools at 0.17
for a budget of 0.925 GB (full 25,772, SWA 4,380 tokens) and a lean pool (full 8,000, SWA 2,560)."""

import dataclasses
import json
import pathlib
import subprocess
import sys

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(_ROOT / "benchmarks"))

import _bench_path  # noqa: E402
from seed_table.setup import Budget, Shape  # noqa: E402
from trace_replay import report, traces  # noqa: E402
from trace_replay.run import grid, run_cells, trace_stats  # noqa: E402
from trace_replay.setup import Sizes, arm_python, pools, worker_arm  # noqa: E402
from trace_replay.steptime import StepTime  # noqa: E402

SHAPE = Shape(window=64, page=4, chunk=1024, cap=8)
SIZES = Sizes(budget=Budget(budget_bytes=9.25e8), lean_max_total_tokens=8_000, lean_ratio=0.32)
SLICE = {"path": str(traces.CONVERSATION.relative_to(_ROOT)), "limit": 120, "minutes": None,
         "scale": 16}
STEP = StepTime(window=SHAPE.window)
SPEEDS = (1.0, 0.1)


def _in_process(arm, spec):
    from trace_replay.replay import run_cell

    return run_cell(dict(spec, per_request=True), log=lambda m: None)


@pytest.fixture(scope="module")
def upstream_15():
    """0.5.15.post1's two arms, in this process: both pools at speed 1, the lean one at 0.1."""
    cells = grid(SPEEDS, ["0.17", "lean"], ["lean"], ["upstream", "islands"])
    return run_cells(cells, SHAPE, SIZES, SLICE, STEP, run=_in_process)


def test_the_step_time_model_s_formula():
    """Pinned by hand: a decode step of two requests (1,000 and 2,000 tokens, w 1024) reads
    3,000 full and 2,024 SWA tokens; a 16,384-token prefill from nothing has 16,384 x 8,192
    attention pairs; speed 2 halves both."""
    m = StepTime()
    kv = (9500 * 3000 + 95000 * (1000 + 1024)) / 2.5e12  # 88.312 us
    assert m.decode([1000, 2000]) == pytest.approx(0.006 + 2 * 0.00025 + kv)
    assert m.decode([1000, 2000]) == pytest.approx(0.006588312)
    assert m.prefill([16384], [0]) == pytest.approx(0.010 + 0.32768 + 2e-10 * 16384 * 8192)
    assert m.prefill([16384], [0]) == pytest.approx(0.3645235)
    assert m.prefill([100, 50], [1000, 0]) == pytest.approx(
        0.010 + 150 * 2e-5 + 2e-10 * (100 * 1050 + 50 * 25))
    fast = dataclasses.replace(m, speed=2.0)
    assert fast.decode([1000, 2000]) == pytest.approx(m.decode([1000, 2000]) / 2)
    assert fast.prefill([7], [3]) == pytest.approx(m.prefill([7], [3]) / 2)
    # chunking a prefill never makes it cheaper: the attention pairs add up to the same total
    one = m.prefill([3000], [0])
    chunks = sum(m.prefill([1000], [c]) for c in (0, 1000, 2000))
    assert chunks == pytest.approx(one + 2 * m.prefill_base_s)


def test_every_request_finishes_and_the_cache_stays_under_the_bound(upstream_15):
    stats = upstream_15["trace"]
    assert stats["requests"] == 120 and 0 < stats["no_forget_bound"] < 1
    assert stats == trace_stats(SLICE)
    for key, c in upstream_15["cells"].items():
        assert c["requests"] == 120 and len(c["per_request"]) == 120, key
        assert c["generated_tokens"] == c["output_tokens"] == stats["output_tokens"], key
        assert c["input_tokens"] == stats["input_tokens"], key
        # pools back to baseline and every row free: run_cell asserts both before it returns
        assert 0 < c["cached_tokens"] <= stats["no_forget_bound"] * c["input_tokens"], key
        assert c["prefill_tokens"] >= c["input_tokens"] - c["cached_tokens"], key
        assert 1 <= c["running_max"] <= SHAPE.cap, key
        assert 0 < c["running_mean"] <= c["running_max"], key
        assert c["model_time_s"] >= c["busy_s"] > 0, key


def test_time_to_first_token_follows_arrivals_and_the_step_time_model(upstream_15):
    """A request's first token comes after its arrival plus at least the prefill of its own new
    tokens (any batch holding them takes at least that long); the first request, alone, waits
    for nothing else; a slower device queues more."""
    for key, c in upstream_15["cells"].items():
        speed = float(key.split("/")[0])
        m = dataclasses.replace(STEP, speed=speed)
        rows = c["per_request"]
        for r in rows:
            own = m.prefill([r["input"] - r["cached"]], [r["cached"]])
            assert r["first_token_s"] - r["arrival_s"] >= own - 1e-9, (key, r)
        assert [r["arrival_s"] for r in rows] == sorted(r["arrival_s"] for r in rows)
        ttft = sorted(r["first_token_s"] - r["arrival_s"] for r in rows)
        assert c["ttft_p50_s"] <= c["ttft_p99_s"] <= c["ttft_max_s"] == pytest.approx(ttft[-1],
                                                                                      abs=1e-3)
        assert c["ttft_mean_s"] == pytest.approx(sum(ttft) / len(ttft), abs=1e-3)
    for arm in ("upstream", "islands"):
        slow, fast = (upstream_15["cells"][f"{s:g}/lean/{arm}"] for s in (0.1, 1.0))
        assert slow["ttft_mean_s"] > 3 * fast["ttft_mean_s"], arm
        assert slow["running_mean_waiting"] >= fast["running_mean"], arm


def test_islands_cache_at_least_as_much_as_upstream_on_the_planner_s_pool(upstream_15):
    up, isl = (upstream_15["cells"][f"1/0.17/{a}"] for a in ("upstream", "islands"))
    assert isl["cached_tokens"] >= up["cached_tokens"]
    assert isl["retractions"] == 0


def test_report_renders_from_the_json_alone(upstream_15, tmp_path):
    out = dict(upstream_15, cells={k: {x: v for x, v in c.items() if x != "per_request"}
                                   for k, c in upstream_15["cells"].items()})
    result = report.result_record(command="x", date="2026-01-01 00:00", git_head="abc",
                                  runtime_s=1.0, shape=SHAPE, sizes=SIZES, trace=SLICE,
                                  speeds=list(SPEEDS), arms=["upstream", "islands"], out=out)
    back = json.loads(json.dumps(result))
    md = report.to_markdown(back)
    assert md == report.to_markdown(result)
    assert "the first 120 requests, lengths / 16" in md
    assert "| 0.17: 25,772 / 4,380 | 0.5.15 upstream |" in md
    assert "| lean: 8,000 / 2,560 | 0.5.15 islands |" in md and "`--max-total-tokens 8,000`" in md
    assert "## Speed 0.1" in md and "no-forget bound" in md
    report.plot_running(back, tmp_path / "r.png")
    assert (tmp_path / "r.png").stat().st_size > 10_000


def test_the_pools_and_the_grid():
    rows = {p["name"]: p for p in pools(["0.17", "lean"], SHAPE, SIZES)}
    assert (rows["0.17"]["full_pool"], rows["0.17"]["swa_pool"]) == (25_772, 4_380)
    assert (rows["lean"]["full_pool"], rows["lean"]["swa_pool"]) == (8_000, 2_560)
    prod = {p["name"]: p for p in pools(["0.32", "0.10", "lean"], Shape(), Sizes())}
    assert (prod["0.32"]["full_pool"], prod["0.32"]["swa_pool"]) == (737_920, 236_096)
    assert (prod["lean"]["full_pool"], prod["lean"]["swa_pool"]) == (400_000, 128_000)
    assert grid([1, 2], ["0.17", "lean"], ["lean"], ["a", "b"]) == [
        (1, "0.17", "a"), (1, "0.17", "b"), (1, "lean", "a"), (1, "lean", "b"),
        (2, "lean", "a"), (2, "lean", "b")]


def test_main_arms_replay_in_their_own_sglang():
    """The 0.5.23 arms, each environment's two (without and with HiCache's host tier) in one
    worker process (``python -m trace_replay.replay '[spec, spec]'``), the two environments'
    workers side by side."""
    from islands_harness.main_arm import MAIN_ISLANDS_PYTHON, MAIN_PYTHON

    if not (MAIN_PYTHON.exists() and MAIN_ISLANDS_PYTHON.exists()):
        pytest.skip("needs .venv-main and .venv-main-islands (scripts/setup_main.sh [--islands])")
    rows = {p["name"]: p for p in pools(["0.17", "lean"], SHAPE, SIZES)}
    bound = trace_stats(SLICE)["no_forget_bound"]
    groups = (("main", "main_hicache"), ("main_islands", "main_islands_hicache"))
    procs = []
    for arms in groups:
        specs = [{"arm": worker_arm(a), "shape": dataclasses.asdict(SHAPE), "pool": rows[p],
                  "trace": SLICE, "steptime": STEP.constants(), "seed": 0, "label": a}
                 for a, p in zip(arms, ("0.17", "lean"))]
        procs.append(subprocess.Popen(
            [arm_python(arms[0]), "-m", "trace_replay.replay", json.dumps(specs)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=_ROOT,
            env=_bench_path.worker_env()))
    for arms, proc in zip(groups, procs):
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-3000:]
        cells = [json.loads(x) for x in stdout.strip().splitlines()]
        for a, c in zip(arms, cells):
            assert c["requests"] == 120 and c["retractions"] == 0, a
            assert 0 < c["cached_tokens"] <= bound * c["input_tokens"], a
            assert c["generated_tokens"] == c["output_tokens"], a
            if a.startswith("main_islands"):
                assert c["swa_cut_tokens"] is not None and c["swa_cut_tokens"] >= 0, a
            else:
                assert c["swa_cut_tokens"] is None, a  # stock 0.5.23 has no SWA-cut counter
        assert cells[1]["host_cached_tokens"] >= 0


def test_cli_help():
    p = subprocess.run([sys.executable, str(_ROOT / "benchmarks" / "trace_replay.py"), "--help"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "no-forget bound" in p.stdout and "--out DIR" in p.stdout


def _parse_error(capsys, *argv) -> str:
    from trace_replay.cli import parse_args

    with pytest.raises(SystemExit) as e:
        parse_args(list(argv))
    assert e.value.code == 2
    return capsys.readouterr().err


def test_a_bad_trace_or_pool_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"timestamp": 0, "input_length": 600, "output_length": 1,
                               "hash_ids": [1, 2]}) + "\n{not json\n")
    err = _parse_error(capsys, "--trace", str(bad), "--arms", "islands", "--pools", "lean")
    assert f"--trace {bad}: {bad}:2: not JSON" in err, err
    short = tmp_path / "short.jsonl"
    short.write_text(json.dumps({"timestamp": 0, "input_length": 600, "output_length": 1,
                                 "hash_ids": [1]}) + "\n")
    err = _parse_error(capsys, "--trace", str(short))
    assert f"{short}:1: 1 hash_ids for input_length 600 (block 512 needs 2)" in err, err
    err = _parse_error(capsys, "--trace", str(tmp_path / "missing.jsonl"))
    assert "missing.jsonl" in err and "No such file" in err, err
    err = _parse_error(capsys, "--pools", "0.5")
    assert "choose from 0.32,0.17,0.10,lean" in err, err
    err = _parse_error(capsys, "--speeds", "1,0")
    assert "--speeds: positive" in err, err
