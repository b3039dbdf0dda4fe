"""benchmarks/seed_table.py: the seed's pool-bound table replayed on the real tree cache and
admission. Here at a scaled shape (w 64, p 4, cp 1024, cap 8, 24 requests of 2,048 in and 256 out,
the planner's pools at 0.17 for a budget of 0.925 GB: full 25,772, SWA 4,380 tokens), where
upstream's hold of about one chunk binds admission at about ``swa_pool / (cp + w)`` = 4 running
requests, and islands' hold of about ``w + p`` does not bind below the cap."""

import ast
import dataclasses
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(_ROOT / "benchmarks"))

import _bench_path  # noqa: E402
from seed_table import report, series  # noqa: E402
from seed_table.run import run_cells  # noqa: E402
from seed_table.setup import ARMS, Budget, Shape, pools  # noqa: E402
from seed_table.workload import Draw, lengths  # noqa: E402

SHAPE = Shape(window=64, page=4, chunk=1024, cap=8)
BUDGET = Budget(budget_bytes=9.25e8)
DRAW = Draw(n=24, input_len=2048, output_len=256)


def _in_process(arm, spec):
    from seed_table.replay import run_cell

    return run_cell(spec, log=lambda m: None)


@pytest.fixture(scope="module")
def fixed_017():
    """0.5.15.post1's two arms on the fixed workload at 0.17, in this process."""
    return run_cells(["fixed"], [0.17], ["upstream", "islands"], SHAPE, BUDGET, DRAW,
                     run=_in_process)


def test_upstream_binds_near_the_pool_over_its_hold_and_islands_do_not(fixed_017):
    pool = fixed_017["pools"][0]
    assert (pool["full_pool"], pool["swa_pool"]) == (25_772, 4_380)
    up, isl = (fixed_017["cells"][f"fixed/0.17/{a}"] for a in ("upstream", "islands"))
    w, cp = SHAPE.window, SHAPE.chunk
    # upstream: each running request pins its last chunk (up to cp; PrefillAdder cuts a chunk
    # short to what the SWA pool has left) plus its decode window, and the SWA pool binds
    assert cp / 2 <= up["swa_held_per_running_mean_waiting"] <= cp + 2 * w
    assert up["swa_held_mean_waiting"] >= 0.85 * pool["swa_pool"]
    bind = pool["swa_pool"] / (cp + w)  # 4.03
    assert 0.85 * bind <= up["running_mean_waiting"] <= pool["swa_pool"] / cp + 1
    # islands: about one window and a page per running request; admission reaches the cap
    assert isl["swa_held_per_running_mean_waiting"] <= 2 * (w + SHAPE.page)
    assert isl["swa_held_mean_waiting"] <= 0.6 * pool["swa_pool"]
    assert isl["running_max"] == SHAPE.cap
    assert isl["running_mean_waiting"] >= 1.5 * up["running_mean_waiting"]
    assert isl["retractions"] == 0 and isl["prefill_tokens"] == isl["input_tokens"] == 24 * 2048
    # every request finishes in both; upstream's retracted requests prefill again
    for c in (up, isl):
        assert c["requests"] == c["generated_tokens"] // 256 == 24
    assert up["prefill_tokens"] >= up["input_tokens"]
    assert up["decode_iterations"] > isl["decode_iterations"]


def test_the_running_series_is_exact(fixed_017):
    c = fixed_017["cells"]["fixed/0.17/islands"]
    run = series.expand(c["running_changes"], c["iterations"])
    assert len(run) == c["iterations"] and max(run) == c["running_max"]
    assert abs(sum(run) / len(run) - c["running_mean"]) < 0.01
    assert series.changes(run) == c["running_changes"]


def test_report_renders_from_the_json_alone(fixed_017, tmp_path):
    result = report.result_record(command="x", date="2026-01-01 00:00", git_head="abc", runtime_s=1.0,
                                  shape=SHAPE, budget=BUDGET, draw=DRAW, workloads=["fixed"],
                                  ratios=[0.17], arms=["upstream", "islands"], out=fixed_017)
    back = json.loads(json.dumps(result))
    md = report.to_markdown(back)
    assert md == report.to_markdown(result)
    assert "| 0.17: 25,772 / 4,380 | 0.5.15 upstream |" in md
    assert "Against the seed" not in md  # the seed's figures are for the seed's shape only
    report.plot_running(back, tmp_path / "r.png")
    assert (tmp_path / "r.png").stat().st_size > 10_000


def _upstream_source(rel: str) -> str:
    spec = importlib.util.find_spec("sglang")
    return (pathlib.Path(spec.submodule_search_locations[0]) / rel).read_text()


def test_the_random_draw_is_bench_serving_s():
    """bench_serving's random dataset: ``compute_random_lens`` (run here from the installed source)
    for the inputs, then the outputs, after ``np.random.seed(--seed)``; defaults --seed 42 and
    --random-range-ratio 0.0, which draw uniformly on [1, len]."""
    import numpy as np

    src = _upstream_source("benchmark/datasets/common.py")
    fn = next(n for n in ast.parse(src).body
              if isinstance(n, ast.FunctionDef) and n.name == "compute_random_lens")
    ns = {"np": np, "List": list}
    exec(compile(ast.Module([fn], []), "common.py", "exec"), ns)
    rnd = _upstream_source("benchmark/datasets/random.py")
    assert rnd.index("input_lens = compute_random_lens(") < rnd.index("output_lens = compute_random_lens(")
    serving = _upstream_source("benchmark/serving.py")
    assert re.search(r'"--seed", type=int, default=42', serving)
    assert re.search(r'"--random-range-ratio",\s*type=float,\s*default=0\.0', serving)
    np.random.seed(42)
    want = {"input": ns["compute_random_lens"](32768, 0.0, 96),
            "output": ns["compute_random_lens"](16384, 0.0, 96)}
    got = lengths("random", Draw())
    assert got == want
    assert min(got["input"]) >= 1 and max(got["input"]) <= 32768
    assert 14_000 < sum(got["input"]) / 96 < 19_000  # uniform on [1, 32768]
    assert lengths("fixed", Draw()) == {"input": [32768] * 96, "output": [16384] * 96}


def test_the_planner_s_pools_at_the_seed_deployment():
    rows = {p["ratio"]: p for p in pools([0.32, 0.17, 0.10], Shape(), Budget())}
    assert (rows[0.32]["full_pool"], rows[0.32]["swa_pool"]) == (737_920, 236_096)
    assert (rows[0.17]["full_pool"], rows[0.17]["swa_pool"]) == (1_030_912, 175_232)
    assert rows[0.17]["planner_bind_without_islands"] == 10.7


def test_native_alloc_kernels_equal_the_interpreted_triton_kernels():
    """``seed_table.alloc_kernels`` against 0.5.15.post1's kernels under TRITON_INTERPRET=1, on
    random batches (pages 1, 4, 64; prefixes at and off a page boundary; empty extends)."""
    code = r"""
import random, sys, torch
from sglang.srt.mem_cache.triton_ops.allocator import alloc_extend_kernel, alloc_decode_kernel
from sglang.srt.utils import next_power_of_2
from seed_table.alloc_kernels import alloc_extend, alloc_decode
rng = random.Random(0)
T = lambda x: torch.tensor(x, dtype=torch.int64)
for trial in range(10):
    page = rng.choice([1, 4, 64])
    bs = rng.randint(1, 6)
    pre = [rng.choice([0, rng.randint(0, 300)]) for _ in range(bs)]
    seq = [p + rng.choice([0, 1, rng.randint(1, 3000)]) for p in pre]
    last = [(rng.randint(1, 50) * page + (p - 1) % page) if p > 0 else -1 for p in pre]
    npages = sum((s + page - 1) // page - (p + page - 1) // page for p, s in zip(pre, seq))
    free = T(rng.sample(range(1, 100000), npages + rng.randint(0, 5)))
    a = torch.full((sum(seq) - sum(pre),), -7, dtype=torch.int64); b = a.clone()
    alloc_extend_kernel[(bs,)](T(pre), T(seq), T(last), free, a, next_power_of_2(bs), page)
    alloc_extend(T(pre), T(seq), T(last), free, b, page)
    assert torch.equal(a, b), ("extend", trial)
    seqd = [rng.randint(1, 3000) for _ in range(bs)]
    lastd = [rng.randint(1, 50) * page + (s - 2) % page for s in seqd]
    free = T(rng.sample(range(1, 100000), sum((s - 1) % page == 0 for s in seqd) + 2))
    a = torch.full((bs,), -7, dtype=torch.int64); b = a.clone()
    alloc_decode_kernel[(bs,)](T(seqd), T(lastd), free, a, next_power_of_2(bs), page)
    alloc_decode(T(seqd), T(lastd), free, b, page)
    assert torch.equal(a, b), ("decode", trial)
print("equal")
"""
    env = _bench_path.worker_env(dict(os.environ, TRITON_INTERPRET="1", SGLANG_USE_CPU_ENGINE="1"))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=env, cwd=_ROOT)
    assert p.returncode == 0 and p.stdout.strip() == "equal", p.stderr[-3000:]


def test_main_arms_replay_in_their_own_sglang():
    """The 0.5.23 arms, each in its environment's worker (``python -m seed_table.replay``): stock
    main already keeps only a window after a chunk commit, so neither binds below the cap here."""
    from islands_harness.main_arm import MAIN_ISLANDS_PYTHON, MAIN_PYTHON

    if not (MAIN_PYTHON.exists() and MAIN_ISLANDS_PYTHON.exists()):
        pytest.skip("needs .venv-main and .venv-main-islands (scripts/setup_main.sh [--islands])")
    draw = dataclasses.replace(DRAW, n=12)
    out = run_cells(["fixed"], [0.17], ["main", "main_islands"], SHAPE, BUDGET, draw)
    for a in ("main", "main_islands"):
        c = out["cells"][f"fixed/0.17/{a}"]
        assert c["requests"] == 12 and c["retractions"] == 0, a
        assert c["running_max"] == SHAPE.cap, a
        assert c["swa_held_per_running_mean_waiting"] <= 3 * (SHAPE.window + SHAPE.page), a
    assert ARMS["main_islands"]["target"] == "0.5.23"


def test_cli_help():
    p = subprocess.run([sys.executable, str(_ROOT / "benchmarks" / "seed_table.py"), "--help"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "bench_serving" in p.stdout and "--out DIR" in p.stdout
