"""The seed-shape benchmark's arms, profiles, pools, server commands and prompts
(``benchmarks/seed_shape.py``).

An ``Arm`` is a server configuration (SWA ratio, extra flags, env); a ``Profile`` is a machine and
its workload (model size, KV budget in bytes, page / chunk / cap, requests and token lengths,
seconds per arm and per load window). Pools come from the planner (``islands_tools.pool_plan``),
in tokens; the server command an arm runs is ``planned_command``'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import random
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[2]
for _p in (ROOT, ROOT / "benchmarks", ROOT / "scripts"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from admission import setup as admission_setup  # noqa: E402  (the seed deployment, the knobs)
import gpu_seed_model  # noqa: E402  (scripts/gpu_seed_model.py)
from islands_harness.server import SglangServer  # noqa: E402
from islands_tools import pool_plan as plan  # noqa: E402

# The seed's headline (H100-80GB, real weights, EAGLE, 32k-in / 16k-out; issue 13).
SEED_FIGURES = {
    "upstream_0.17": {"mean_running": 21, "output_tok_s": 3995},
    "islands_0.17": {"mean_running": 46, "output_tok_s": 5695},
    "mean_latency_ratio": 0.63,
    "retractions": 0,
}
BASELINE = "upstream_0.17"
MAIN_BASELINE = "main_0.17"
BASELINES = (BASELINE, MAIN_BASELINE)
"""Each target's reference arm in the ratio table: stock at the seed's lean ratio."""
MIN_WINDOW_S = 30.0  # an arm whose boot leaves less than this for its load window is not measured
PROMPT_SEED = 20261202


@dataclasses.dataclass(frozen=True)
class Arm:
    name: str
    ratio: float
    args: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()
    # which interpreter serves it: "" the benchmark's own (sglang 0.5.15.post1); "main" or
    # "main_islands": sglang 0.5.23, stock (patches-main/series-stock) or with the islands series
    # (--main-python / --main-islands-python; scripts/gpu_check.sh --bundle-main gives both)
    python: str = ""


TARGETS = ("0.5.15.post1", "0.5.23")
ARMS: Dict[str, Arm] = {a.name: a for a in (
    Arm("upstream_0.17", 0.17),
    Arm("islands_0.17", 0.17, ("--enable-swa-islands",)),
    Arm("upstream_0.32", 0.32),
    Arm("upstream_knobs_0.17", 0.17, (), tuple(sorted(admission_setup.KNOBS_ENV.items()))),
    # sglang 0.5.23 (upstream main): the same shape and pools, stock main against main islands
    Arm("main_0.17", 0.17, python="main"),
    Arm("main_islands_0.17", 0.17, ("--enable-swa-islands",), python="main_islands"),
    Arm("main_0.32", 0.32, python="main"),
    Arm("main_islands_0.32", 0.32, ("--enable-swa-islands",), python="main_islands"),
)}
PRIORITY = ["upstream_0.17", "islands_0.17", "upstream_0.32", "upstream_knobs_0.17"]
"""0.5.15.post1's arms in the order they start (the default --arms)."""
MAIN_PRIORITY = ["main_0.17", "main_islands_0.17", "main_0.32", "main_islands_0.32"]
"""0.5.23's arms in the order they start (--target 0.5.23): the two at the seed's lean ratio,
then stock at the ratio before islands, then islands there."""


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    model_size: str           # scripts/gpu_seed_model.py --size
    device: str               # "cuda": the caller's full argument list; "cpu": SglangServer's
    kv: str                   # "seed": the seed deployment's bytes per token; "config": the model's
    kv_dtype: str             # with kv == "config"
    budget_bytes: float       # KV bytes the planner sizes the pools from
    page: int
    chunk: int
    cap: int
    requests: int
    input_len: int
    output_len: int
    arm_s: float              # one arm at most: boot + warm-up + load window + stop
    load_s: float             # the load window, the same in every arm
    sample_s: float
    decode_log_interval: int
    warmup: bool
    server_args: Tuple[str, ...]
    env: Tuple[Tuple[str, str], ...] = ()
    stop_s: float = 25.0      # kept for stopping the server inside the arm's time


PROFILES: Dict[str, Profile] = {p.name: p for p in (
    Profile(
        name="h200", model_size="full", device="cuda", kv="seed", kv_dtype="fp8",
        budget_bytes=admission_setup.Production.budget_bytes, page=64, chunk=16384, cap=48,
        requests=96, input_len=24576, output_len=256, arm_s=165.0, load_s=85.0, sample_s=0.5,
        decode_log_interval=20, warmup=True,
        server_args=(
            "--load-format", "dummy", "--skip-tokenizer-init",
            "--dtype", "bfloat16", "--kv-cache-dtype", "fp8_e4m3",
            # Gemma 4 on Hopper: SGLang accepts only triton (trtllm_mha is SM100-only)
            "--attention-backend", "triton",
            # what an offline bundle has (no flashinfer, no grammar backend); harmless elsewhere
            "--sampling-backend", "pytorch", "--grammar-backend", "none",
            # decode CUDA graphs up to the cap; no prefill graphs (16k chunks gain nothing from
            # them, and capturing 45 token counts of a 30-layer MoE costs boot time)
            "--cuda-graph-max-bs-decode", "48", "--disable-prefill-cuda-graph",
            "--skip-server-warmup", "--random-seed", "0",
        ),
        env=(("SGLANG_USE_CPU_ENGINE", "0"),),
    ),
    Profile(
        name="cpu-tiny", model_size="tiny", device="cpu", kv="config", kv_dtype="fp32",
        budget_bytes=24e6, page=16, chunk=256, cap=8,
        requests=4, input_len=384, output_len=4, arm_s=170.0, load_s=100.0, sample_s=1.0,
        decode_log_interval=1, warmup=False,
        server_args=(
            "--load-format", "dummy", "--skip-tokenizer-init",
            # SGLang 0.5.15.post1 serves Gemma 4 only on triton attention (CPU: the Triton
            # interpreter, TRITON_INTERPRET=1); it overrides BASE_ARGS' torch_native
            "--attention-backend", "triton",
        ),
        env=(("TRITON_INTERPRET", "1"),),
        stop_s=20.0,
    ),
)}


def kv_cost(profile: Profile, model_dir: Optional[pathlib.Path]):
    """Bytes per token the pools are sized from, and a line saying where they came from."""
    if profile.kv == "seed":
        p = admission_setup.Production()
        return (plan.KVBytesPerToken(full=p.full_bytes, swa=p.swa_bytes, draft=p.draft_bytes),
                f"the seed deployment: full {p.full_bytes:.0f} B, SWA {p.swa_bytes:.0f} B, draft "
                f"{p.draft_bytes:.0f} B per token (benchmarks/admission/setup.py Production)")
    layout = plan.kv_layout_from_shape(plan.read_model_shape(str(model_dir)), profile.kv_dtype)
    return layout, (f"{model_dir} ({profile.kv_dtype}): {layout.full_layers} full x "
                    f"{layout.full_bytes_per_layer} B + {layout.swa_layers} SWA x "
                    f"{layout.swa_bytes_per_layer} B per token")


def planner_command(profile: Profile, model_dir: Optional[pathlib.Path], ratios) -> List[str]:
    """The scripts/swa_pool_plan.py command that prints the same pools."""
    window = str(gpu_seed_model.SIZES[profile.model_size]["sliding_window"])
    if profile.kv == "seed":
        p = admission_setup.Production()
        src = ["--full-bytes-per-token", f"{p.full_bytes:.0f}", "--swa-bytes-per-token",
               f"{p.swa_bytes:.0f}", "--draft-bytes-per-token", f"{p.draft_bytes:.0f}",
               "--window", window]
    else:
        src = ["--model-config", str(model_dir), "--kv-dtype", profile.kv_dtype]
    return ["scripts/swa_pool_plan.py", *src, "--budget", f"{profile.budget_bytes:.0f}",
            "--page", str(profile.page), "--chunk", str(profile.chunk), "--max-running",
            str(profile.cap), "--ratios", ",".join(f"{r:.2f}" for r in sorted(ratios)), "--json"]


def arm_pools(profile: Profile, model_dir: Optional[pathlib.Path], ratios) -> Dict[float, Any]:
    kv, _ = kv_cost(profile, model_dir)
    return {r: plan.solve_pool_sizes(kv, profile.budget_bytes, r, profile.page) for r in ratios}


def server_args(profile: Profile, arm: Arm, pool) -> List[str]:
    return [*profile.server_args,
            "--page-size", str(profile.page), "--chunked-prefill-size", str(profile.chunk),
            "--max-running-requests", str(profile.cap),
            "--max-total-tokens", str(pool.full_tokens),
            "--swa-full-tokens-ratio", f"{arm.ratio:.2f}",
            "--enable-metrics", "--decode-log-interval", str(profile.decode_log_interval),
            *arm.args]


def arm_env(profile: Profile, arm: Arm) -> Dict[str, str]:
    return {**dict(profile.env), **dict(arm.env)}


class DeviceServer(SglangServer):
    """SglangServer's lifecycle with the caller's whole argument list: none of the CPU test
    server's BASE_ARGS (--device cpu, torch_native, fp32, no CUDA graphs)."""

    def command(self) -> List[str]:
        return [self.python, "-m", "sglang.launch_server", "--model-path", self.model_path,
                "--host", self.host, "--port", str(self.port), *self.extra_args]


def make_server(profile: Profile, model_dir, args, env, **kw) -> SglangServer:
    cls = DeviceServer if profile.device == "cuda" else SglangServer
    return cls(model_dir, args, env=env, omp_threads=4 if profile.device == "cuda" else 2, **kw)


def planned_command(profile: Profile, model_dir, arm: Arm, pool,
                    python: Optional[str] = None) -> List[str]:
    """The exact argv an arm's server runs, with ``$PORT`` for the port it is given at boot
    (``python``: the arm's interpreter, default this one)."""
    srv = make_server(profile, model_dir, server_args(profile, arm, pool), arm_env(profile, arm),
                      python=python)
    srv.port = "$PORT"  # command() only formats it
    return srv.command()


def make_prompts(seed: int, n: int, length: int, vocab: int) -> List[List[int]]:
    """``n`` prompts of ``length`` token ids in [4, vocab) (ids 0-3: pad, eos, bos, unk)."""
    rng = random.Random(seed)
    return [[rng.randrange(4, vocab) for _ in range(length)] for _ in range(n)]


def prompts_digest(prompts: Sequence[Sequence[int]]) -> str:
    h = hashlib.sha256()
    for p in prompts:
        h.update(json.dumps(list(p)).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]
