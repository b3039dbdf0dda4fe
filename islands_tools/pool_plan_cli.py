"""The pool planner's command line (``scripts/swa_pool_plan.py``): its arguments (sizes, ratios, a
model's config.json or its byte counts), the plan ``pool_plan`` computes from them, and the table
or JSON it prints. Plans ``--swa-full-tokens-ratio`` for a hybrid sliding-window-attention model
under SWA islands; the pool formulas are the ones the server checks at startup
(``sglang.srt.mem_cache.swa_island_guard``, through ``islands_tools.pool_plan``)."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from typing import Optional

from islands_tools import pool_plan as plan

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'9.5KB' -> 9500, '37GB' -> 37_000_000_000, '100KiB' -> 102400, '512' -> 512 (bytes)."""
    m = _SIZE_RE.match(str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: use a non-negative number of bytes with an optional unit "
            "B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), e.g. 9.5KB"
        )
    value = float(m.group(1)) * _UNITS[unit]
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: not a finite number")
    return int(round(value))


def _count(text: str) -> int:
    try:
        value = int(str(text).replace(",", "").replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: expected a whole number of tokens/requests") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: must not be negative")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"invalid margin {text!r}: must be a non-negative fraction, e.g. 0.25")
    return value


def parse_ratios(text: str) -> list:
    """'0.05:0.40:0.05' (start:stop:step, stop included) or '0.10,0.17,0.32'."""
    try:
        if ":" in text:
            start, stop, step = (float(x) for x in text.split(":"))
            if step <= 0:
                raise ValueError
            n = int(math.floor((stop - start) / step + 1e-9))
            ratios = [round(start + k * step, 10) for k in range(n + 1)]
        else:
            ratios = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid --ratios {text!r}: use START:STOP:STEP (e.g. 0.05:0.40:0.05) or a comma list (0.10,0.17,0.32)"
        ) from None
    bad = [r for r in ratios if not (0 < r <= 1)]
    if not ratios or bad:
        raise argparse.ArgumentTypeError(
            f"invalid --ratios {text!r}: every ratio must be in (0, 1]" + (f", got {bad[0]}" if bad else "")
        )
    return ratios


DESCRIPTION = """\
Plan the two KV pools of a hybrid sliding-window-attention model served by SGLang
0.5.15.post1 with the radix cache (HybridSWAPoolConfigurator), and choose
--swa-full-tokens-ratio for SWA islands.

Both pools share one token index space of T tokens. The full pool holds all T tokens
for the full-attention layers; the SWA pool holds r*T tokens for the sliding-window
layers, r = --swa-full-tokens-ratio. One token of index space costs

    c(r) = full + r * swa + draft            bytes per token
    T_max(r) = budget // c(r), floored to a page (SGLang's own rounding)

With islands, a running request keeps only the last w + p SWA tokens (w = model window,
p = page), so N running requests need the island floor

    floor = cp + N * (w + p)                 cp = one un-stashed prefill chunk

The recommended ratio is the smallest multiple of 0.01 whose SWA pool holds
floor * (1 + margin). Without islands each request pins about one chunk (hold H = cp),
so admission binds near r*T / H running requests; the plan prints that too, because
turning islands off requires raising the ratio again.

Units: sizes take B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of
1024); a bare number is bytes. Token counts are plain integers. The output prints KB
and GB as powers of 1000.
"""

EPILOG = """\
inputs, in detail:
  bytes per token      Either --model-config (read through SGLang's ModelConfig: SWA and
                       full layer ids, KV heads, head_dim, v_head_dim, swa_* overrides,
                       Gemma-4 global_* names; config.json is read directly only where
                       ModelConfig cannot load it; per layer K+V = kv_heads x (head_dim +
                       v_head_dim) x dtype bytes, fp8 = 1, bf16/fp16 = 2, fp32 = 4), or the
                       three explicit totals over all layers of each kind. Draft
                       (EAGLE/STANDALONE) KV is budgeted like full-attention KV, as SGLang
                       does.
  --budget             Bytes free for KV on one GPU after weights, activations and CUDA
                       graphs: SGLang's available_bytes. Estimate it from a boot log:
                       max_total_num_tokens x c(r) at the ratio that boot used.
  --window             The model's sliding window w (config.json sliding_window, e.g.
                       1024), not SGLang's window_left = w - 1.
  --max-running        The concurrency the SWA pool must carry, normally your
                       --max-running-requests.

examples:
  # The design note's deployment (Gemma-4 26B-A4B, fp8 KV, EAGLE draft, one H100-80GB):
  %(prog)s --full-bytes-per-token 9.5KB --swa-bytes-per-token 95KB \\
      --draft-bytes-per-token 10.24KB --budget 37GB --window 1024 --page 64 \\
      --chunk 16384 --max-running 48 --ratios 0.05,0.10,0.17,0.32

  # From a checkpoint's config.json, fp8 KV, one draft layer, machine-readable:
  %(prog)s --model-config /models/gemma-4-26b-a4b/config.json --kv-dtype fp8 \\
      --draft-layers 1 --budget 37GB --page 64 --chunk 16384 --max-running 48 --json

exit status: 0 on success, 2 on bad input (including a floor that no ratio can fit).
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="swa_pool_plan.py",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_argument_group("bytes per token: a model config, or explicit totals")
    src.add_argument("--model-config", metavar="PATH",
                     help="HF config.json (or the directory holding it) of the hybrid SWA model")
    src.add_argument("--kv-dtype", metavar="DTYPE",
                     help="KV cache dtype, required with --model-config: fp8, bf16, fp16 or fp32 "
                          "(SGLang's fp8_e4m3 / fp8_e5m2 / bfloat16 / float16 / float32 also accepted)")
    src.add_argument("--draft-layers", type=_count, default=0, metavar="N",
                     help="with --model-config: speculative draft layers (EAGLE/STANDALONE), "
                          "each budgeted as one full-attention layer (default 0)")
    src.add_argument("--full-bytes-per-token", type=parse_size, metavar="SIZE",
                     help="bytes one token costs across ALL full-attention layers (e.g. 9.5KB)")
    src.add_argument("--swa-bytes-per-token", type=parse_size, metavar="SIZE",
                     help="bytes one token costs across ALL sliding-window layers, if retained (e.g. 95KB)")
    src.add_argument("--draft-bytes-per-token", type=parse_size, default=None, metavar="SIZE",
                     help="bytes of speculative draft KV per token of index space (e.g. 10.24KB; default 0)")

    par = p.add_argument_group(
        "parallelism: what a ratio means per rank",
        "Every rank runs its own scheduler and both pools; --budget is one GPU's, so the plan's "
        "pools are one rank's. TP splits the KV heads across the ranks of a replica (the same "
        "tokens on each); DP replicas each take their share of the requests.")
    par.add_argument("--tp-size", type=_count, default=1, metavar="N",
                     help="tensor-parallel size (default 1; with --enable-dp-attention the "
                          "attention-TP size, tp/dp). A rank stores max(1, kv_heads // N) KV heads "
                          "per layer, as SGLang's ModelConfig.get_num_kv_heads: fewer heads than "
                          "ranks are replicated, one per rank. Bytes per token become per rank; "
                          "token counts do not change")
    par.add_argument("--dp-size", type=_count, default=1, metavar="D",
                     help="data-parallel replicas (default 1), each with its own pools: "
                          "--max-running is then the whole deployment's and each replica carries "
                          "ceil(N / D). (SGLang's --max-running-requests is per replica under "
                          "plain --dp-size and divided by D under --enable-dp-attention)")
    par.add_argument("--kv-heads", type=_count, default=None, metavar="H",
                     help="with explicit sizes and --tp-size: the model's KV heads per "
                          "full-attention layer (draft layers count the same); the sizes are "
                          "then the whole model's (TP 1) and are scaled to one rank")
    par.add_argument("--swa-kv-heads", type=_count, default=None, metavar="H",
                     help="with --kv-heads: KV heads per sliding-window layer, if they differ "
                          "(default --kv-heads)")

    dep = p.add_argument_group("deployment")
    dep.add_argument("--budget", type=parse_size, required=True, metavar="SIZE",
                     help="bytes available for KV on one GPU (e.g. 37GB)")
    dep.add_argument("--window", type=_count, metavar="TOKENS",
                     help="model sliding window w in tokens (default: sliding_window from --model-config)")
    dep.add_argument("--page", type=_count, required=True, metavar="TOKENS",
                     help="--page-size in tokens (e.g. 64); pools are floored to whole pages")
    dep.add_argument("--chunk", type=_count, required=True, metavar="TOKENS",
                     help="--chunked-prefill-size in tokens (e.g. 16384)")
    dep.add_argument("--max-running", type=_count, required=True, metavar="N",
                     help="running requests the SWA pool must carry (--max-running-requests, e.g. 48; "
                          "with --dp-size, the whole deployment's)")
    dep.add_argument("--max-total-tokens", type=_count, default=None, metavar="TOKENS",
                     help="SGLang's --max-total-tokens cap on the index space, if you set one")

    pol = p.add_argument_group("policy and output")
    pol.add_argument("--margin", type=_fraction, default=0.25, metavar="FRACTION",
                     help="head-room over the island floor for the recommendation (default 0.25 = 25%%)")
    pol.add_argument("--chunks-in-flight", type=_count, default=1, metavar="K",
                     help="un-stashed prefill chunks counted in the floor (default 1; the overlap "
                          "scheduler can have 2)")
    pol.add_argument("--decode-tail", type=_count, default=0, metavar="TOKENS",
                     help="extra SWA tokens per request between decode-evictor runs "
                          "(default 0, the steady state)")
    pol.add_argument("--mean-accept-len", type=float, default=None, metavar="X",
                     help="tokens committed per decode step (speculative decoding's mean accept "
                          "length, 1 without it); sets --decode-tail to the request-owned SWA a "
                          "request accrues between frees: min(128 x X, chunk/4). Together with "
                          "--chunks-in-flight 2 this is the serving floor (the spec's 0.17 at "
                          "accept 8.5)")
    pol.add_argument("--hold", type=_count, default=None, metavar="TOKENS",
                     help="per-request SWA hold without islands (default: --chunk, one prefill chunk)")
    pol.add_argument("--ratios", type=parse_ratios, default=parse_ratios("0.05:0.40:0.05"),
                     metavar="START:STOP:STEP|LIST",
                     help="ratios for the table: 0.05:0.40:0.05 (default; stop included) or 0.10,0.17,0.32")
    pol.add_argument("--json", action="store_true", help="print one JSON object instead of the text report")
    live = p.add_argument_group(
        "live traffic (0.5.23 with the islands series, --enable-metrics; docs/OBSERVING.md)")
    live.add_argument("--metrics-url", metavar="URL",
                      help="read what the SWA pool costs in hits from a running server "
                           "(http://HOST:PORT): the share of full-attention hits the SWA cut "
                           "(sglang:swa_cut_tokens_total) and what it suggests; no plan is made")
    live.add_argument("--current-ratio", type=float, default=None, metavar="R",
                      help="with --metrics-url: the server's --swa-full-tokens-ratio, for a "
                           "suggested ratio when the cut share calls for a higher one")
    return p


def _read_config(path: str) -> dict:
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise ValueError(f"cannot read --model-config {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"--model-config {path} is not valid JSON: {e}") from None


def _heads(total: int, tp: int, per_rank: Optional[int] = None) -> dict:
    """{"total": H, "per_rank": max(1, H // tp) unless given, "replicas": ranks holding each
    head (tp / H when there are fewer heads than ranks, else 1)}."""
    per_rank = plan.kv_heads_per_rank(total, tp) if per_rank is None else per_rank
    return {"total": total, "per_rank": per_rank, "replicas": tp * per_rank // total if total < tp else 1}


def resolve_inputs(args, parser):
    """Returns (kv, window, source description, KV heads per layer kind or None) or calls
    parser.error (exit 2). ``kv`` is one rank's bytes per token."""
    explicit = [args.full_bytes_per_token, args.swa_bytes_per_token, args.draft_bytes_per_token]
    if args.tp_size < 1 or args.dp_size < 1:
        parser.error("--tp-size and --dp-size must be at least 1")
    if args.model_config:
        if any(v is not None for v in explicit):
            parser.error("give either --model-config or the --*-bytes-per-token sizes, not both")
        if args.kv_heads is not None or args.swa_kv_heads is not None:
            parser.error("--kv-heads and --swa-kv-heads apply only to explicit sizes "
                         "(--model-config gives the heads)")
        if not args.kv_dtype:
            parser.error("--model-config needs --kv-dtype (fp8, bf16, fp16 or fp32)")
        config = _read_config(args.model_config)
        plan.dtype_bytes(args.kv_dtype)  # an unknown dtype is reported before a bad config
        shape = plan.read_model_shape(args.model_config, tp_size=args.tp_size, config=config)
        layout = plan.kv_layout_from_shape(shape, args.kv_dtype, draft_layers=args.draft_layers)
        window = args.window if args.window is not None else shape.sliding_window
        if window is None:
            parser.error("--model-config has no sliding_window; pass --window")
        source = (
            f"{args.model_config} ({args.kv_dtype}): {layout.full_layers} full x "
            f"{layout.full_bytes_per_layer} B, {layout.swa_layers} SWA x {layout.swa_bytes_per_layer} B, "
            f"{layout.draft_layers} draft x {layout.full_bytes_per_layer} B per token"
        )
        whole = shape if args.tp_size == 1 else plan.read_model_shape(
            args.model_config, tp_size=1, config=config)
        # per rank: what the reader got at this TP size (ModelConfig.get_num_kv_heads itself)
        heads = {"full": _heads(whole.kv_heads, args.tp_size, shape.kv_heads),
                 "swa": _heads(whole.swa_kv_heads, args.tp_size, shape.swa_kv_heads)}
        return layout, window, source, heads
    if args.full_bytes_per_token is None or args.swa_bytes_per_token is None:
        parser.error(
            "bytes per token are missing: give --model-config PATH --kv-dtype DTYPE, or both "
            "--full-bytes-per-token and --swa-bytes-per-token"
        )
    if args.kv_dtype or args.draft_layers:
        parser.error("--kv-dtype and --draft-layers only apply with --model-config")
    if args.window is None:
        parser.error("--window is required with explicit bytes per token (the model's sliding window)")
    if args.swa_kv_heads is not None and args.kv_heads is None:
        parser.error("--swa-kv-heads needs --kv-heads")
    if args.tp_size != 1 and args.kv_heads is None:
        parser.error(
            "--tp-size with explicit sizes needs --kv-heads (and --swa-kv-heads if the SWA layers "
            "have other heads): a rank stores max(1, heads // tp) of them, so its bytes per token "
            "depend on the head count"
        )
    if (args.kv_heads, args.swa_kv_heads).count(0):
        parser.error("--kv-heads and --swa-kv-heads must be at least 1")
    kv = plan.KVBytesPerToken(
        full=args.full_bytes_per_token,
        swa=args.swa_bytes_per_token,
        draft=args.draft_bytes_per_token or 0,
    )
    if args.kv_heads is None:
        return kv, args.window, "explicit sizes", None
    swa_heads = args.swa_kv_heads if args.swa_kv_heads is not None else args.kv_heads
    heads = {"full": _heads(args.kv_heads, args.tp_size), "swa": _heads(swa_heads, args.tp_size)}
    if args.tp_size == 1:
        return kv, args.window, "explicit sizes", heads
    per_rank = plan.per_rank_bytes_per_token(kv, args.tp_size, args.kv_heads, swa_heads)
    return per_rank, args.window, f"explicit sizes of the whole model, one rank of TP {args.tp_size}", heads


def make_plan(args, parser, argv=None) -> dict:
    kv, window, source, heads = resolve_inputs(args, parser)
    bpt = kv.bytes_per_token if isinstance(kv, plan.HybridKVLayout) else kv
    parallel = plan.Parallelism(tp_size=args.tp_size, dp_size=args.dp_size)
    n_replica = parallel.requests_per_replica(args.max_running)
    if args.mean_accept_len is not None:
        if args.mean_accept_len <= 0:
            parser.error("--mean-accept-len must be positive")
        args.decode_tail = plan.decode_tail_tokens(
            args.mean_accept_len, decode_interval=max(1, args.chunk // 4)
        )
    workload = plan.Workload(
        n_running=n_replica,
        window=window,
        page=args.page,
        chunk=args.chunk,
        chunks_in_flight=args.chunks_in_flight,
        decode_tail=args.decode_tail,
    )
    hold = args.hold if args.hold is not None else plan.hold_without_islands(window, args.page, args.chunk)
    if hold <= 0:
        parser.error("--hold must be positive")
    cap = args.max_total_tokens
    if cap is not None and cap <= 0:
        parser.error("--max-total-tokens must be positive")
    rec = plan.recommend_ratio(kv, args.budget, workload, margin=args.margin, max_total_tokens_cap=cap)
    ratios = sorted(set(args.ratios) | {rec.ratio})
    rows = plan.plan_table(kv, args.budget, workload, ratios, hold=hold, max_total_tokens_cap=cap)
    return {
        "command": " ".join(["scripts/swa_pool_plan.py"] + list(sys.argv[1:] if argv is None else argv)),
        "inputs": {
            "source": source,
            "full_bytes_per_token": bpt.full,
            "swa_bytes_per_token": bpt.swa,
            "draft_bytes_per_token": bpt.draft,
            "budget_bytes": args.budget,
            "window": window,
            "page": args.page,
            "chunk": args.chunk,
            "max_running": args.max_running,
            "max_total_tokens": cap,
            "chunks_in_flight": args.chunks_in_flight,
            "decode_tail": args.decode_tail,
            "margin": args.margin,
            "hold_without_islands": hold,
            "hold_source": "--hold" if args.hold is not None else "one prefill chunk",
        },
        "cost_per_token": {"fixed_bytes": bpt.fixed, "swa_bytes": bpt.swa,
                           "formula": "c(r) = full + draft + r * swa"},
        "island_floor": workload.floor,
        "pool_floor_ratio": rec.pool_floor_ratio,
        "recommendation": {
            "swa_full_tokens_ratio": rec.ratio,
            "cost_per_token_bytes": rec.pool.cost_per_token,
            "max_total_tokens": rec.pool.full_tokens,
            "swa_pool_tokens": rec.pool.swa_tokens,
            "margin": rec.margin,
            "margin_target": rec.margin_target,
            "admission_bind_without_islands": plan.admission_bind(rec.pool.swa_tokens, hold),
        },
        "parallelism": {
            "tp_size": parallel.tp_size,
            "dp_size": parallel.dp_size,
            "gpus": parallel.gpus,
            "kv_heads": heads,
            "running_total": args.max_running,
            "running_per_replica": n_replica,
            # one rank at the recommended ratio (every rank of the deployment alike)
            "per_rank": {
                "swa_full_tokens_ratio": rec.ratio,
                "max_total_tokens": rec.pool.full_tokens,
                "swa_pool_tokens": rec.pool.swa_tokens,
                "full_pool_bytes": rec.pool.full_tokens * bpt.full,
                "draft_pool_bytes": rec.pool.full_tokens * bpt.draft,
                "swa_pool_bytes": rec.pool.swa_tokens * bpt.swa,
                "kv_bytes": rec.pool.full_tokens * bpt.fixed + rec.pool.swa_tokens * bpt.swa,
                "running_requests": n_replica,
                "island_capacity": plan.island_capacity(
                    rec.pool.swa_tokens, window, args.page, args.chunk,
                    chunks_in_flight=args.chunks_in_flight, decode_tail=args.decode_tail),
                "admission_bind_without_islands": plan.admission_bind(rec.pool.swa_tokens, hold),
            },
        },
        "table": [
            {
                "ratio": r.ratio,
                "cost_per_token_bytes": r.cost_per_token,
                "max_total_tokens": r.full_tokens,
                "swa_pool_tokens": r.swa_tokens,
                "floor_margin": r.floor_margin,
                "island_capacity": r.island_capacity,
                "admission_bind_without_islands": r.bind_without_islands,
            }
            for r in rows
        ],
    }


def _kb(x: float) -> str:
    return f"{x / 1000:,.2f} KB"


def render(p: dict) -> str:
    i, rec, par = p["inputs"], p["recommendation"], p["parallelism"]
    n, w, pg, cp = par["running_per_replica"], i["window"], i["page"], i["chunk"]
    spread = par["gpus"] > 1
    floor_terms = f"{i['chunks_in_flight']} x {cp} + {n} x ({w} + {pg}" + (
        f" + {i['decode_tail']})" if i["decode_tail"] else ")")
    out = [
        "SWA pool plan: sglang 0.5.15.post1 HybridSWAPoolConfigurator (radix cache); KB = 1000 B, GB = 1e9 B",
        "",
        f"  bytes per token   full {_kb(i['full_bytes_per_token'])}, SWA {_kb(i['swa_bytes_per_token'])} "
        f"(if retained), draft {_kb(i['draft_bytes_per_token'])}  [{i['source']}]",
        f"  budget            {i['budget_bytes'] / 1e9:,.2f} GB ({i['budget_bytes']:,} B) for KV per GPU"
        + (f", --max-total-tokens {i['max_total_tokens']:,}" if i["max_total_tokens"] else ""),
        f"  workload          {n} running"
        + (f" per replica ({par['running_total']} over DP {par['dp_size']})" if par["dp_size"] > 1 else "")
        + f", window w={w}, page p={pg}, chunk cp={cp}",
        "",
        f"  c(r)              {_kb(p['cost_per_token']['fixed_bytes'])} + r x {_kb(p['cost_per_token']['swa_bytes'])} per token of index space",
        f"  T_max(r)          floor_p(budget // c(r)), SWA pool floor_p(int(T_max x r))",
        f"  island floor      {floor_terms} = {p['island_floor']:,} tokens",
        f"  pool floor ratio  {p['pool_floor_ratio']:.4f} (below it the island floor cannot fit)",
        "",
        f"  recommended       --swa-full-tokens-ratio {rec['swa_full_tokens_ratio']:.2f}",
        f"                    c = {_kb(rec['cost_per_token_bytes'])}, T_max = {rec['max_total_tokens']:,} tokens, "
        f"SWA pool = {rec['swa_pool_tokens']:,} tokens",
        f"                    margin over the floor {rec['margin']:+.1%} (target {rec['margin_target']:+.0%})",
        f"  without islands   hold H = {i['hold_without_islands']:,} tokens per request ({i['hold_source']}):",
        f"                    at {rec['swa_full_tokens_ratio']:.2f} admission binds at "
        f"{rec['admission_bind_without_islands']:.1f} running requests (of {n}); turning islands",
        "                    off needs the ratio raised with it",
        *(_render_per_rank(p) if spread else []),
        "",
        f"  {'ratio':>5}  {'c(r) KB':>8}  {'T_max':>10}  {'SWA pool':>9}  {'vs floor':>8}  {'N islands':>9}  {'N w/o islands':>13}",
    ]
    for r in p["table"]:
        mark = " *" if r["ratio"] == rec["swa_full_tokens_ratio"] else ""
        out.append(
            f"  {r['ratio']:>5.2f}  {r['cost_per_token_bytes'] / 1000:>8.2f}  {r['max_total_tokens']:>10,}  "
            f"{r['swa_pool_tokens']:>9,}  {r['floor_margin']:>+8.1%}  {r['island_capacity']:>9,}  "
            f"{r['admission_bind_without_islands']:>13.1f}{mark}"
        )
    out += [
        "",
        "  vs floor: SWA pool / island floor - 1.  N islands: running requests the island floor admits.",
        "  N w/o islands: SWA pool / H, where stock SGLang's admission binds.  *: recommended.",
    ]
    if spread:
        out.append(f"  Every row is one rank's (TP {par['tp_size']} x DP {par['dp_size']}); N counts one "
                   f"replica's requests, the deployment admits {par['dp_size']} times as many.")
    return "\n".join(out)


def _render_per_rank(p: dict) -> list:
    """What the recommended ratio means on one rank, under TP and DP."""
    i, par = p["inputs"], p["parallelism"]
    r = par["per_rank"]
    heads = par["kv_heads"]

    def head_text(kind: str) -> str:
        h = heads[kind]
        rep = f", each on {h['replicas']} ranks" if h["replicas"] > 1 else ""
        return f"{kind.upper() if kind == 'swa' else kind} {h['per_rank']} of {h['total']}{rep}"

    gb = lambda x: f"{x / 1e9:,.2f} GB"  # noqa: E731
    pad = " " * 20
    lines = [f"  per rank          TP {par['tp_size']} x DP {par['dp_size']} = {par['gpus']} GPUs, "
             "each rank with both pools of its own"]
    if heads:
        lines.append(f"{pad}KV heads per rank: {head_text('full')}; {head_text('swa')}")
    lines += [
        f"{pad}at {r['swa_full_tokens_ratio']:.2f}: full + draft {r['max_total_tokens']:,} tokens x "
        f"{_kb(i['full_bytes_per_token'] + i['draft_bytes_per_token'])} = "
        f"{gb(r['full_pool_bytes'] + r['draft_pool_bytes'])},",
        f"{pad}SWA {r['swa_pool_tokens']:,} tokens x {_kb(i['swa_bytes_per_token'])} = "
        f"{gb(r['swa_pool_bytes'])}; {gb(r['kv_bytes'])} of the {gb(i['budget_bytes'])} budget",
        f"{pad}{r['running_requests']} running requests per replica at the cap"
        + (f" ({par['running_total']} over DP {par['dp_size']})" if par["dp_size"] > 1 else "")
        + (f", on each of its {par['tp_size']} TP ranks" if par["tp_size"] > 1 else ""),
        f"{pad}its SWA pool admits {r['island_capacity']:,} with islands, "
        f"{r['admission_bind_without_islands']:.1f} without",
    ]
    return lines


def main(argv=None) -> int:
    parser = build_parser()
    live = argparse.ArgumentParser(add_help=False)  # --metrics-url needs no plan inputs
    live.add_argument("--metrics-url")
    live.add_argument("--current-ratio", type=float, default=None)
    known, _ = live.parse_known_args(argv)
    if known.metrics_url:
        from islands_tools import swa_cut

        try:
            print(swa_cut.advice(swa_cut.read(known.metrics_url), known.current_ratio))
        except (OSError, ValueError) as e:  # requests' errors are OSErrors
            parser.error(f"--metrics-url {known.metrics_url}: {e}")
        return 0
    args = parser.parse_args(argv)
    try:
        result = make_plan(args, parser, argv)
    except ValueError as e:
        parser.error(str(e))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(render(result))
    return 0

