"""The seed-shape GPU benchmark's pieces that run anywhere (issue 13).

- scripts/gpu_seed_model.py: the config-only Gemma 4 26B-A4B (text) directory has the published
  shapes, and SGLang's own ModelConfig reads the same KV layout from it as from the published
  multimodal layout; the tiny variant keeps that structure.
- benchmarks/seed_shape.py --dry-run: the exact server commands, with --max-total-tokens per arm
  from the planner and one prompt set for every arm; its summary and ratio table.
- scripts/gpu_check.sh: per-step time limits (bench first, the gate with what is left), run with
  stand-ins for the GPU machine's nvidia-smi and python that record what they were asked to run.
- The tiny variant served by the real CPU server with --load-format dummy --skip-tokenizer-init,
  through the bench's own code path (server mark).
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import re
import shlex
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
for _p in (ROOT / "benchmarks", ROOT / "scripts"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import gpu_seed_model  # noqa: E402
from seed_shape import cli as seed_shape  # noqa: E402
from islands_harness.client import StreamingRequest  # noqa: E402
from islands_harness.server import GenerateResult  # noqa: E402
from islands_tools import pool_plan as plan  # noqa: E402

SEED_KV = plan.KVBytesPerToken(full=9500, swa=95000, draft=10240)  # README's seed deployment


def _model_config(path):
    from sglang.srt.configs.model_config import ModelConfig

    logging.disable(logging.WARNING)
    try:
        return ModelConfig(str(path))
    finally:
        logging.disable(logging.NOTSET)


def _kv_view(mc):
    return {
        "head_dim": mc.head_dim, "v_head_dim": mc.v_head_dim,
        "swa_head_dim": mc.swa_head_dim, "swa_v_head_dim": mc.swa_v_head_dim,
        "kv_heads": mc.get_num_kv_heads(1), "swa_kv_heads": mc.get_swa_num_kv_heads(1),
        "swa_layers": list(mc.swa_attention_layer_ids),
        "full_layers": list(mc.full_attention_layer_ids),
        "window": mc.hf_text_config.sliding_window, "context": mc.context_len,
        "hybrid_swa": mc.is_hybrid_swa, "hybrid_swa_compress": mc.is_hybrid_swa_compress,
        "vocab": mc.vocab_size, "layers": mc.num_hidden_layers,
    }


def test_full_size_has_the_published_shapes_and_sglang_reads_them_like_the_published_layout(tmp_path):
    served = gpu_seed_model.build("full", tmp_path / "full")
    published = gpu_seed_model.build("full", tmp_path / "pub", published=True)
    assert sorted(p.name for p in served.iterdir()) == [".gpu_seed_model.json", "config.json"]
    cfg = json.loads((served / "config.json").read_text())
    assert cfg["model_type"] == "gemma4_text" and cfg["architectures"] == ["Gemma4ForCausalLM"]
    for k, v in {"hidden_size": 2816, "intermediate_size": 2112, "num_hidden_layers": 30,
                 "num_attention_heads": 16, "enable_moe_block": True, "num_experts": 128,
                 "top_k_experts": 8, "moe_intermediate_size": 704, "sliding_window": 1024,
                 "vocab_size": 262144, "attention_k_eq_v": True, "hidden_size_per_layer_input": 0,
                 "final_logit_softcapping": 30.0, "max_position_embeddings": 262144,
                 "global_head_dim": 512, "num_global_key_value_heads": 2,
                 # SGLang's convention: base = full attention, swa_* = sliding
                 "head_dim": 512, "num_key_value_heads": 2, "swa_head_dim": 256,
                 "swa_v_head_dim": 256, "swa_num_key_value_heads": 8, "dtype": "bfloat16"}.items():
        assert cfg[k] == v, (k, cfg.get(k), v)
    assert cfg["layer_types"] == (["sliding_attention"] * 5 + ["full_attention"]) * 5
    pub = json.loads((published / "config.json").read_text())
    assert pub["model_type"] == "gemma4" and pub["text_config"]["head_dim"] == 256
    assert pub["text_config"]["num_key_value_heads"] == 8

    mc_served, mc_pub = _model_config(served), _model_config(published)
    assert not mc_served.is_multimodal and mc_pub.is_multimodal
    view = _kv_view(mc_served)
    assert view == _kv_view(mc_pub)  # the parser's swap of the published layout == our file
    assert view["full_layers"] == [5, 11, 17, 23, 29] and len(view["swa_layers"]) == 25
    assert (view["head_dim"], view["kv_heads"], view["swa_head_dim"], view["swa_kv_heads"]) == (512, 2, 256, 8)
    assert view["hybrid_swa"] and view["hybrid_swa_compress"]

    layout = plan.kv_layout_from_shape(plan.read_model_shape(str(served)), "fp8")
    assert (layout.full_layers * layout.full_bytes_per_layer,
            layout.swa_layers * layout.swa_bytes_per_layer) == (10240, 102400)


def test_tiny_variant_keeps_the_structure(tmp_path):
    full, tiny = gpu_seed_model.SIZES["full"], gpu_seed_model.SIZES["tiny"]
    assert set(full) == set(tiny)
    scaled = {"vocab_size", "vocab_size_per_layer_input", "hidden_size", "intermediate_size",
              "num_hidden_layers", "layer_types", "num_attention_heads", "num_key_value_heads",
              "head_dim", "num_global_key_value_heads", "global_head_dim", "num_experts",
              "top_k_experts", "moe_intermediate_size", "sliding_window",
              "max_position_embeddings"}
    cpu_only = {"enable_moe_block", "final_logit_softcapping"}  # see the module docstring
    assert {k for k in full if full[k] != tiny[k]} == scaled | cpu_only
    assert tiny["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"]
    mc = _model_config(gpu_seed_model.build("tiny", tmp_path / "tiny"))
    v = _kv_view(mc)
    assert v["full_layers"] == [5] and v["swa_layers"] == [0, 1, 2, 3, 4] and v["window"] == 64
    assert v["head_dim"] != v["swa_head_dim"] and v["kv_heads"] != v["swa_kv_heads"]


def _dry_run(*args):
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seed_shape.py"), "--dry-run",
                        *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=300)
    return p


def _flag(argv, name):
    i = argv.index(name)
    return argv[i + 1]


def test_dry_run_prints_the_exact_commands_with_planner_pools_and_one_prompt_set():
    p = _dry_run("--out", "/tmp/seed-shape-dry-run-unused")
    assert p.returncode == 0, p.stdout[-3000:]
    lines = p.stdout.splitlines()
    assert "(dry run: nothing started)" in lines
    assert not pathlib.Path("/tmp/seed-shape-dry-run-unused").exists()  # nothing written
    arms = [ln[3:] for ln in lines if ln.startswith("== ")]
    assert arms == ["upstream_0.17", "islands_0.17", "upstream_0.32", "upstream_knobs_0.17"]
    cmds = {}
    for i, ln in enumerate(lines):
        if ln.startswith("== "):
            cmds[ln[3:]] = (shlex.split(lines[i + 1][2:]), lines[i + 2])
    # the planner's own command line gives the same pools as the library
    plan_line = next(ln for ln in lines if ln.startswith("+ scripts/swa_pool_plan.py"))
    pj = subprocess.run([sys.executable, *shlex.split(plan_line[2:])], cwd=ROOT, text=True,
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=120)
    table = {row["ratio"]: row["max_total_tokens"] for row in json.loads(pj.stdout)["table"]}
    want = {r: plan.solve_pool_sizes(SEED_KV, 37e9, r, 64).full_tokens for r in (0.17, 0.32)}
    assert table[0.17] == want[0.17] and table[0.32] == want[0.32]
    assert 1_000_000 <= want[0.17] <= 1_050_000 and 730_000 <= want[0.32] <= 750_000  # ~1.0M, ~740k
    models, clients = set(), set()
    for name, (argv, client) in cmds.items():
        assert argv[0] == "env"
        env = dict(a.split("=", 1) for a in argv[1:argv.index("-m") - 1])
        server = argv[argv.index("-m") - 1:]
        assert server[1:3] == ["-m", "sglang.launch_server"]
        models.add(_flag(server, "--model-path"))
        for flag, value in (("--load-format", "dummy"), ("--kv-cache-dtype", "fp8_e4m3"),
                            ("--page-size", "64"), ("--chunked-prefill-size", "16384"),
                            ("--max-running-requests", "48"), ("--attention-backend", "triton"),
                            ("--dtype", "bfloat16")):
            assert _flag(server, flag) == value, (name, flag)
        assert "--skip-tokenizer-init" in server and "--enable-metrics" in server
        assert "--device" not in server  # not the CPU test server's argument set
        ratio = float(name.rsplit("_", 1)[1])
        assert float(_flag(server, "--swa-full-tokens-ratio")) == ratio
        assert int(_flag(server, "--max-total-tokens")) == want[ratio]
        assert ("--enable-swa-islands" in server) == name.startswith("islands")
        knobs = {k for k in env if k.startswith("SGLANG_OPT_SWA_")}
        assert knobs == ({"SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT",
                          "SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW"}
                         if "knobs" in name else set()), name
        assert env["SGLANG_USE_CPU_ENGINE"] == "0"
        clients.add(client)
    assert len(models) == 1 and len(clients) == 1  # one model, one prompt set for every arm
    client = clients.pop()
    assert "96 x StreamingRequest" in client and "max_new_tokens=256" in client
    prompts = seed_shape.make_prompts(seed_shape.PROMPT_SEED, 96, 24576, 262144)
    assert f"sha256 {seed_shape.prompts_digest(prompts)}" in client
    assert all(len(x) == 24576 > 16384 for x in prompts)  # every prompt takes two chunks


def test_arguments_refuse_prompts_of_one_chunk_and_unknown_arms(capsys):
    for argv, message in ((["--input-len", "16384"], "fits in one chunk (16384)"),
                          (["--arms", "islands_0.17,bogus"], "unknown arm(s) ['bogus']")):
        with pytest.raises(SystemExit) as e:
            seed_shape.parse_args(["--dry-run", *argv])
        assert e.value.code == 2 and message in capsys.readouterr().err
    a = seed_shape.parse_args(["--input-len", "16385", "--arms", "islands_0.17"])
    assert a.prof.input_len == 16385 and a.arm_list == ["islands_0.17"]


def test_prompts_are_seeded_and_distinct():
    a = seed_shape.make_prompts(7, 3, 50, 1024)
    assert a == seed_shape.make_prompts(7, 3, 50, 1024)
    assert seed_shape.prompts_digest(a) != seed_shape.prompts_digest(seed_shape.make_prompts(8, 3, 50, 1024))
    assert len({tuple(x) for x in a}) == 3 and all(4 <= t < 1024 for x in a for t in x)


def _stream(started, finished, n, ok=True):
    s = StreamingRequest("http://unused", [5, 6], n)
    s.started_at, s.finished_at = started, finished
    s.output_ids = list(range(n))
    if ok:
        s.result = GenerateResult(output_ids=list(range(n)), meta_info={})
    s.done.set()
    return s


def test_summary_and_ratio_table_from_measured_values():
    pool = plan.solve_pool_sizes(SEED_KV, 37e9, 0.17, 64)
    arm_u, arm_i = seed_shape.ARMS["upstream_0.17"], seed_shape.ARMS["islands_0.17"]
    # upstream: 2 of 3 completed in a 10 s window; running 1 for 5 s then 3 for 5 s
    ups = [_stream(0.0, 4.0, 8), _stream(0.0, 9.0, 8), _stream(0.0, 12.0, 3, ok=False)]
    up_samples = [{"t": 0.0, "running": 1, "swa_used": 8000, "held_mean": 0},
                  {"t": 5.0, "running": 3, "swa_used": 24000, "held_mean": 0},
                  {"t": 11.0, "running": 9, "swa_used": 99999, "held_mean": 0}]  # after the window
    u = seed_shape.summarize(arm_u, pool, ups, [8, 8, 3], 0.0, 10.0, up_samples, 0,
                             {"max_running_log": 3, "max_swa_used_tokens": 25000})
    assert u["completed"] == 2 and u["window_limited"] and u["output_tokens"] == 19
    assert u["output_tok_s"] == 1.9 and u["mean_running"] == 2.0 and u["max_running"] == 3
    assert u["latency_mean_s"] == 6.5 and u["latency_p99_s"] == 9.0
    assert u["peak_swa_used"] == 25000 and u["swa_held_per_running"] == 8000.0
    assert u["swa_held_per_req_island_gauge"] is None and u["max_total_tokens"] == pool.full_tokens
    isl = [_stream(0.0, 2.0, 8), _stream(0.0, 3.0, 8), _stream(0.0, 4.0, 8)]
    i_samples = [{"t": 0.0, "running": 4, "swa_used": 4400, "held_mean": 1088},
                 {"t": 2.0, "running": 6, "swa_used": 6600, "held_mean": 1090}]
    i = seed_shape.summarize(arm_i, pool, isl, [8, 8, 8], 0.0, 4.0, i_samples, 0,
                             {"max_running_log": 6, "retractions_log": 1})
    assert i["completed"] == 3 and not i["window_limited"] and i["output_tok_s"] == 6.0
    assert i["mean_running"] == 5.0 and i["retractions"] == 1
    assert i["swa_held_per_running"] == 1100.0 and i["swa_held_per_req_island_gauge"] == 1089.0
    md = seed_shape.tables({"profile": "t", "model": "m", "workload_line": "w",
                            "planner_command": ["scripts/swa_pool_plan.py"], "skipped":
                            [["upstream_0.32", "10 s left"]], "arms": [u, i]})
    row = next(ln for ln in md.splitlines() if ln.startswith("| islands_0.17 / upstream_0.17"))
    # mean running 5/2, max 6/3, tok/s 6/1.9, mean E2E 3/6.5, p99 4/9, held 1100/8000
    assert row == ("| islands_0.17 / upstream_0.17 | 2.500 | 2.000 | 3.158 | 0.462 | 0.444 | "
                   "0.138 |"), row
    assert "| seed: islands_0.17 / upstream_0.17 | 2.190 | - | 1.426 | 0.630 |" in md
    assert "| upstream_0.32 | not run: 10 s left |" in md and "Window-limited" in md


# ----------------------------------------------------------------------------- gpu_check.sh

STUB_PY = """#!/usr/bin/env bash
# the GPU machine's python, for this test: records each call and succeeds
args="$*"  # one line per call (the kernel check is a multi-line -c)
printf '%s|%s\\n' "$(date +%s)" "${args//$'\\n'/ }" >> "$STUB_LOG"
case "$2" in
  *KERNEL-OK*) [ -n "${STUB_KERNEL_NO:-}" ] && echo "KERNEL-NO: $STUB_KERNEL_NO" || echo KERNEL-OK ;;
  *torch*) echo "torch (stub)" ;;
esac
exit 0
"""


def _gpu_check(tmp_path, *args, env_extra=None):
    bin_dir, venv = tmp_path / "bin", tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    venv.mkdir(parents=True, exist_ok=True)
    (bin_dir / "nvidia-smi").write_text("#!/usr/bin/env bash\necho 'NVIDIA H200 (stub), 143771 MiB'\n")
    # the machine's python3 (what --bundle-main's interpreters run) and the 0.5.23 venvs'
    for f in (venv / "python", venv / "python-main", venv / "python-main-islands", bin_dir / "python3"):
        f.write_text(STUB_PY)
    for f in (bin_dir / "nvidia-smi", *venv.iterdir(), bin_dir / "python3"):
        f.chmod(0o755)
    log = tmp_path / "calls.log"
    log.write_text("")
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", VENV=str(tmp_path / "venv"),
               STUB_LOG=str(log), MAIN_PYTHON=str(venv / "python-main"),
               MAIN_ISLANDS_PYTHON=str(venv / "python-main-islands"),
               ISLANDS_MAIN_SITE=str(tmp_path / "main-site"))
    env.update(env_extra or {})
    p = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--skip-setup",
                        "--out", str(tmp_path / "out"), *args], cwd=ROOT, env=env, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    calls = [ln.split("|", 1)[1] for ln in log.read_text().splitlines()]
    return p, calls


def _budget_of(calls, script):
    argv = next(shlex.split(c) for c in calls if script in c)
    return int(argv[argv.index("--budget") + 1])


def test_gpu_check_runs_the_bench_first_and_gives_the_gate_what_is_left(tmp_path):
    p, calls = _gpu_check(tmp_path, "--steps", "bench,gate")
    assert p.returncode == 0, p.stdout
    bench = next(i for i, c in enumerate(calls) if "benchmarks/seed_shape.py" in c)
    gate = next(i for i, c in enumerate(calls) if "scripts/equality_gate.py" in c)
    assert bench < gate
    assert f"--out {tmp_path}/out/seed_shape" in calls[bench]
    assert _budget_of(calls, "benchmarks/seed_shape.py") == 330 - 20  # BENCH_S, its own margin
    assert "PASS seed-shape benchmark" in p.stdout and "PASS equality gate (gpu)" in p.stdout
    gate_budget = int(p.stdout.split("summary (budget ")[1].split("s")[0])
    assert 540 - 5 - 5 <= gate_budget <= 540 - 5  # the stub bench took no time: all the rest
    assert "unit tests" not in p.stdout and "hold benchmark" not in p.stdout


def test_gpu_check_skips_a_step_the_budget_cannot_hold(tmp_path):
    p, calls = _gpu_check(tmp_path, "--steps", "bench,gate", "--budget", "250")
    assert p.returncode == 0, p.stdout
    assert not any("seed_shape.py" in c for c in calls)
    assert re.search(r"SKIP seed-shape benchmark \(gpu\): 2(4\d|50) s left of the 250 s budget",
                     p.stdout), p.stdout
    assert "180 s kept for later steps" in p.stdout
    assert any("scripts/equality_gate.py" in c for c in calls)
    p, calls = _gpu_check(tmp_path, "--steps", "bench", "--budget", "400")
    assert _budget_of(calls, "benchmarks/seed_shape.py") >= 400 - 5 - 20 - 2  # no gate: all of it
    p, _ = _gpu_check(tmp_path, "--steps", "bench,lint")
    assert p.returncode == 2 and "unknown step 'lint'" in p.stdout


def test_dry_run_for_0_5_23_serves_the_same_shape_with_main_and_main_islands():
    """--target 0.5.23: the arms main_0.17, main_islands_0.17, main_0.32, main_islands_0.32, each
    from its own interpreter, with exactly the 0.5.15.post1 arms' pools, flags and prompts."""
    out = ("--out", "/tmp/seed-shape-dry-run-unused")  # one model path for both
    p = _dry_run("--target", "0.5.23", "--main-python", "/opt/m/python-main",
                 "--main-islands-python", "/opt/m/python-main-islands", *out)
    assert p.returncode == 0, p.stdout[-3000:]
    lines = p.stdout.splitlines()
    arms = [ln[3:] for ln in lines if ln.startswith("== ")]
    assert arms == seed_shape.MAIN_PRIORITY == ["main_0.17", "main_islands_0.17", "main_0.32",
                                                "main_islands_0.32"]
    old = _dry_run("--arms", "upstream_0.17,islands_0.17,upstream_0.32", *out)
    assert old.returncode == 0, old.stdout[-3000:]

    def commands(out):
        ls = out.splitlines()
        return {ln[3:]: (shlex.split(ls[i + 1][2:]), ls[i + 2]) for i, ln in enumerate(ls)
                if ln.startswith("== ")}

    new_cmds, old_cmds = commands(p.stdout), commands(old.stdout)
    pair = {"main_0.17": "upstream_0.17", "main_islands_0.17": "islands_0.17",
            "main_0.32": "upstream_0.32", "main_islands_0.32": "upstream_0.32"}
    for name, (argv, client) in new_cmds.items():
        py = argv[argv.index("-m") - 1]
        assert py == ("/opt/m/python-main-islands" if "islands" in name else "/opt/m/python-main")
        server = argv[argv.index("-m") - 1:]
        assert ("--enable-swa-islands" in server) == ("islands" in name)
        ref_argv, ref_client = old_cmds[pair[name]]
        ref = ref_argv[ref_argv.index("-m") - 1:]
        strip = lambda a: [x for x in a[1:] if x != "--enable-swa-islands"]  # noqa: E731
        assert strip(server) == strip(ref), name  # same model dir, pools, shape, every flag
        assert client == ref_client  # the same prompts
    a = seed_shape.parse_args(["--target", "0.5.23"])
    assert a.arm_list == seed_shape.MAIN_PRIORITY
    assert a.pythons["main_0.17"].endswith(".venv-main/bin/python")
    assert a.pythons["main_islands_0.17"].endswith(".venv-main-islands/bin/python")
    assert seed_shape.parse_args([]).pythons == {n: None for n in seed_shape.PRIORITY}


def test_ratio_table_of_0_5_23_is_over_main_0_17():
    row = {"requests": 4, "completed": 4, "window_s": 1.0, "output_tok_s": 2.0, "max_total_tokens": 1,
           "swa_pool_plan": 1, "mean_running": 2.0, "max_running": 2, "retractions": 0,
           "latency_mean_s": 1.0, "latency_p99_s": 1.0, "peak_swa_used": 1,
           "swa_held_per_running": 100.0, "swa_held_per_req_island_gauge": None}
    m = dict(row, arm="main_0.17", ratio=0.17)
    i = dict(row, arm="main_islands_0.17", ratio=0.17, mean_running=4.0)
    md = seed_shape.tables({"profile": "h200", "model": "m", "workload_line": "w",
                            "planner_command": ["x"], "skipped": [], "arms": [m, i]})
    assert "| main_islands_0.17 / main_0.17 | 2.000 |" in md, md


def test_gpu_check_main_step_gets_the_call_alone_or_leaves_the_gate_its_minimum(tmp_path):
    p, calls = _gpu_check(tmp_path, "--steps", "main")
    assert p.returncode == 0, p.stdout
    bench = [c for c in calls if "benchmarks/seed_shape.py" in c]
    assert len(bench) == 1 and "--target 0.5.23" in bench[0]
    assert f"--main-python {tmp_path}/venv/bin/python-main " in bench[0]
    assert f"--main-islands-python {tmp_path}/venv/bin/python-main-islands " in bench[0]
    assert f"--out {tmp_path}/out/seed_shape_main" in bench[0]
    assert 540 - 5 - 20 - 3 <= _budget_of(calls, "benchmarks/seed_shape.py") <= 540 - 5 - 20
    assert "PASS 0.5.23 seed-shape benchmark" in p.stdout
    # the kernel was checked in both interpreters before anything booted
    checks = [c for c in calls if "KERNEL-OK" in c]
    assert len(checks) == 2
    p, calls = _gpu_check(tmp_path, "--steps", "main,gate")
    assert _budget_of(calls, "benchmarks/seed_shape.py") == 330 - 20  # MAIN_S, its own margin
    assert "PASS equality gate (gpu)" in p.stdout
    # bench then main: the bench leaves MAIN_MIN_S (240) for main
    p, calls = _gpu_check(tmp_path, "--steps", "bench,main")
    budgets = [int(shlex.split(c)[shlex.split(c).index("--budget") + 1]) for c in calls
               if "benchmarks/seed_shape.py" in c]
    # the clock ticks during setup: a slow machine may have spent a few seconds of the budget
    assert len(budgets) == 2 and 540 - 240 - 5 - 20 - 3 <= budgets[0] <= 540 - 240 - 5 - 20, budgets
    # all three do not fit 540 s: the bench is skipped, main and the gate run
    p, calls = _gpu_check(tmp_path, "--steps", "bench,main,gate")
    assert re.search(r"SKIP seed-shape benchmark \(gpu\): \d+ s left of the 540 s budget "
                     r"\(needs 120 s, 420 s kept for later steps\)", p.stdout), p.stdout
    assert any("--target 0.5.23" in c for c in calls)
    p, _ = _gpu_check(tmp_path, "--steps", "main", "--budget", "100")
    assert "SKIP 0.5.23 seed-shape benchmark (gpu): " in p.stdout and "needs 120 s" in p.stdout


def test_gpu_check_main_step_says_skip_with_the_reason_the_kernel_does_not_load(tmp_path):
    why = ("sglang-kernel 0.4.10 (built for torch==2.14.1) does not load with this python's torch "
           "2.11.0+cu130: ImportError: undefined symbol")
    p, calls = _gpu_check(tmp_path, "--steps", "main", env_extra={"STUB_KERNEL_NO": why})
    assert p.returncode == 0, p.stdout
    assert f"SKIP 0.5.23 seed-shape benchmark (gpu): {why} ({tmp_path}/venv/bin/python-main)" in p.stdout
    assert not any("seed_shape.py" in c for c in calls)
    p, _ = _gpu_check(tmp_path, "--steps", "main",
                      env_extra={"MAIN_PYTHON": str(tmp_path / "nowhere" / "python")})
    assert "SKIP 0.5.23 seed-shape benchmark (gpu): no interpreter" in p.stdout


def test_gpu_check_bundle_main_builds_one_interpreter_per_arm(tmp_path):
    """--bundle-main: main/ and main/ + the overlay, each with a wrapper of the machine's python3;
    without --steps only `main` runs, and the driver is a bare python3 with python/ on its path."""
    import tarfile

    src = tmp_path / "src"
    for rel, text in {"common/dep.py": "", "main/sglang/__init__.py": "stock = 1\n",
                      "main/sglang/srt/scheduler.py": "stock\n",
                      "main_islands.overlay/sglang/srt/scheduler.py": "islands\n",
                      "main_islands.overlay/sglang/srt/mem_cache/swa_island_guard.py": "",
                      "bundle.json": '{"target": "0.5.23"}\n'}.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    (tmp_path / "bundle").mkdir()
    with tarfile.open(tmp_path / "bundle" / "site.tar.xz", "w:xz") as t:
        for name in ("common", "main", "main_islands.overlay", "bundle.json"):
            t.add(src / name, arcname=name)
    p, calls = _gpu_check(tmp_path, "--bundle-main", str(tmp_path / "bundle"))
    assert p.returncode == 0, p.stdout
    site = tmp_path / "main-site"
    assert (site / "main_islands/sglang/srt/scheduler.py").read_text() == "islands\n"
    assert (site / "main/sglang/srt/scheduler.py").read_text() == "stock\n"
    assert (site / "main_islands/sglang/srt/mem_cache/swa_island_guard.py").is_file()
    assert not (site / "main/sglang/srt/mem_cache").exists()
    wrap = (site / "bin/python-main-islands").read_text()
    assert f'PYTHONPATH="{ROOT}/scripts/gpu_offline:{site}/main_islands:{site}/common"' in wrap
    assert 'exec python3 "$@"' in wrap
    assert "unit tests" not in p.stdout and "hold benchmark" not in p.stdout
    bench = next(c for c in calls if "benchmarks/seed_shape.py" in c)
    assert f"--main-python {site}/bin/python-main " in bench
    assert f"--main-islands-python {site}/bin/python-main-islands " in bench
    p, _ = _gpu_check(tmp_path, "--bundle-main", str(tmp_path / "nowhere"))
    assert p.returncode == 2 and "site.tar.xz missing" in p.stdout


# ----------------------------------------------------------------------------- CPU server


@pytest.mark.server
def test_tiny_variant_serves_token_ids_with_dummy_weights_through_the_bench(tmp_path):
    """The bench's own path on the CPU server: a config-only directory (no weights, no
    tokenizer), --load-format dummy --skip-tokenizer-init, planner pools, streamed token-id
    requests, the islands' metrics."""
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seed_shape.py"), "--profile",
                        "cpu-tiny", "--arms", "islands_0.17", "--out", str(tmp_path),
                        "--budget", "170"], cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    elapsed = time.monotonic() - t0
    assert p.returncode == 0, p.stdout[-4000:]
    res = json.loads((tmp_path / "seed_shape.json").read_text())
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == [".gpu_seed_model.json",
                                                                       "config.json"]
    [arm] = res["arms"]
    prof = seed_shape.PROFILES["cpu-tiny"]
    assert "error" not in arm, arm
    cmd = arm["command"]
    assert _flag(cmd, "--load-format") == "dummy" and "--skip-tokenizer-init" in cmd
    assert "--enable-swa-islands" in cmd and _flag(cmd, "--device") == "cpu"
    pool = plan.solve_pool_sizes(
        plan.kv_layout_from_shape(plan.read_model_shape(str(tmp_path / "model")), "fp32"),
        prof.budget_bytes, 0.17, prof.page)
    assert int(_flag(cmd, "--max-total-tokens")) == pool.full_tokens
    assert arm["boot_log"] == {"swa_pool_log": pool.swa_tokens, "full_pool_log": pool.full_tokens}
    assert arm["completed"] == arm["requests"] == prof.requests and arm["failed"] == 0
    assert arm["output_tokens"] == prof.requests * prof.output_len
    assert len(arm["first_output_ids"]) == prof.output_len
    assert all(0 <= t < gpu_seed_model.TINY_TEXT["vocab_size"] for t in arm["first_output_ids"])
    assert arm["log"]["prefill_tokens"] == prof.requests * prof.input_len  # two chunks each, cold
    assert 2 <= arm["max_running"] <= prof.cap and arm["samples"] > 0
    assert arm["retractions"] == 0 and arm["log"]["retractions_log"] == 0
    w_p = gpu_seed_model.TINY_TEXT["sliding_window"] + prof.page
    # islands report their hold, and it is about w + p (a few decode tokens), not a chunk
    assert arm["swa_held_per_req_island_gauge"] is not None
    assert w_p - prof.page <= arm["swa_held_per_req_island_gauge"] <= w_p + prof.page
    md = (tmp_path / "seed_shape.md").read_text()
    assert "| islands_0.17 | 0.17 |" in md and f"{prof.requests}/{prof.requests}" in md
    assert md.strip() in p.stdout  # the tables are printed too
    assert elapsed < 200  # the budget bounds the run (170 s, plus start-up)
