"""Multi-turn chat on the real SGLang server (CPU, a tiny hybrid-SWA model), one column per arm,
then the two hits islands add: a branch inside a prefill chunk and a follow-up sent while its
predecessor still streams.

Targets (`--target`): 0.5.23 (default; the model tiny Gemma 4, `islands_harness.tiny_gemma4`; arms
`main` and `main islands`, both from `.venv-main-islands`, the flag the only difference) and
0.5.15.post1 (tiny Laguna; arms `upstream` and `islands` from `.venv`). `scripts/demo.sh` builds
the environment the target needs and runs this file with its interpreter.

For each arm: boot `sglang.launch_server` with the shared demo arguments plus the arm's own, run
the same temperature-0 chat workload through the OpenAI-compatible API (`/v1/chat/completions`
with the `openai` client; every turn re-sends the whole transcript, so each turn should hit the
radix cache for the previous turns), sample the KV pools from `/metrics` while it runs, stop the
server by its process group, and finally print one table with a column per arm.

Arms: `TARGETS` below; `--arm NAME=ARGS` (repeatable) replaces the default set.

Units: all counts are tokens. "used" is sglang's own pool accounting, `*_num_used` = pool size -
available - evictable (held by running requests or locked in the tree), the quantity behind the
`sglang:swa_used_tokens` / `sglang:kv_used_tokens` gauges. "peak" is the maximum over every
scheduler step of a turn, read from the server log (`--decode-log-interval 1`; see `PoolPeaks`).
Pool sizes and the end-of-run state come from `/metrics` (`--enable-metrics`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import shlex
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from islands_harness.server import (SglangServer,  # noqa: E402
                                    raise_keyboard_interrupt_on_signals)
from islands_harness import sched_log  # noqa: E402
from islands_harness.client import fetch_metrics  # noqa: E402
from islands_harness.conversations import (flush_cache_when_idle,  # noqa: E402
                                           follow_up_while_running)
from islands_harness.models import MODELS, get_model, real_vocab  # noqa: E402

# target -> (default model, {arm name: sglang arguments on top of DEMO_SERVER_ARGS})
TARGETS: dict[str, tuple[str, dict[str, list[str]]]] = {
    "0.5.23": ("gemma4", {"main": [], "main islands": ["--enable-swa-islands"]}),
    "0.5.15.post1": ("laguna", {"upstream": [], "islands": ["--enable-swa-islands"]}),
}
CHUNK = 512
BRANCH_PROMPT, BRANCH_AT = 900, 700  # the branch falls inside the prompt's second chunk
FOLLOW_K, FOLLOW_DELTA = 2, 8  # the follow-up carries 2 decode islands (cp/4 = 128) + 8 tokens

WINDOW = 32
DEMO_SERVER_ARGS = [
    "--page-size", "1",
    "--chunked-prefill-size", str(CHUNK),
    "--max-total-tokens", "16384",
    "--swa-full-tokens-ratio", "0.25",
    "--enable-metrics",       # /metrics: pool gauges
    "--enable-cache-report",  # usage.prompt_tokens_details.cached_tokens in OpenAI responses
    "--decode-log-interval", "1",  # refresh the gauges at every decode step
]

SYSTEM_PROMPT = (
    "You are a helpful assistant on a small boat. Answer briefly and clearly. "
    "The sea is calm in the morning and rough in the evening; the sailors keep a log of the wind, "
    "the waves, the stars and every port they visit. Radix trees share prefixes; sliding window "
    "attention keeps only the most recent tokens; full attention layers keep every token. "
) * 3
USER_TURNS = [
    "Hello, can you tell me a story about the sea?",
    "What happens next, when the wind rises?",
    "And how do the sailors find their way home at night?",
    "Tell me the ending in one or two sentences.",
]


@dataclasses.dataclass
class TurnStat:
    conv: int
    turn: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    latency_s: float
    swa_used_peak: float
    full_used_peak: float
    reply: str


@dataclasses.dataclass
class ArmResult:
    name: str
    server_args: list[str]
    boot_s: float = 0.0
    wall_s: float = 0.0
    turns: list[TurnStat] = dataclasses.field(default_factory=list)
    swa_pool: float = 0.0
    full_pool: float = 0.0
    swa_used_peak: float = 0.0
    full_used_peak: float = 0.0
    final: dict[str, float] = dataclasses.field(default_factory=dict)
    branch_cached: int = 0
    follow_up_output_hit: int = 0


class PoolPeaks:
    """Per-step pool usage from the server log (`--decode-log-interval 1` logs every step).

    Decode lines carry exact counts (`#full token: N`, `#swa token: N`, the same `*_num_used` as
    the /metrics gauges); prefill lines carry only two-decimal usage ratios, converted to tokens
    with the pool sizes (exact to +-0.5% of the pool). `peaks()` covers the log written since the
    previous call.
    """

    def __init__(self, log_path: pathlib.Path, swa_pool: float, full_pool: float):
        self.tail = sched_log.LogTail(log_path)
        self.swa_pool, self.full_pool = swa_pool, full_pool

    def peaks(self) -> tuple[float, float]:
        swa = full = 0.0
        for line in self.tail.advance().splitlines():
            e = sched_log.parse_line(line)
            if e is None or e["kind"] == "retract":
                continue
            if e["kind"] == "decode":
                full, swa = max(full, float(e["full_tok"])), max(swa, float(e["swa_tok"]))
            else:
                full = max(full, round(e["full_use"] * self.full_pool))
                swa = max(swa, round(e["swa_use"] * self.swa_pool))
        return swa, full


def log(msg: str) -> None:
    print(f"[demo] {msg}", file=sys.stderr, flush=True)


def run_chat(srv: SglangServer, pools: PoolPeaks, res: ArmResult, *, convs: int, turns: int,
             max_tokens: int) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{srv.base_url}/v1", api_key="none", timeout=300)
    transcripts = [[{"role": "system", "content": f"Conversation {c + 1}. {SYSTEM_PROMPT}"}]
                   for c in range(convs)]
    for t in range(turns):
        for c in range(convs):
            msgs = transcripts[c]
            msgs.append({"role": "user", "content": USER_TURNS[t % len(USER_TURNS)]})
            pools.peaks()  # skip anything logged between turns
            t0 = time.monotonic()
            r = client.chat.completions.create(model="default", messages=msgs, temperature=0,
                                               max_tokens=max_tokens)
            dt = time.monotonic() - t0
            time.sleep(0.05)  # the scheduler logs the last step before the reply leaves; margin
            swa_peak, full_peak = pools.peaks()
            reply = r.choices[0].message.content or ""
            msgs.append({"role": "assistant", "content": reply})
            details = r.usage.prompt_tokens_details
            cached = (details.cached_tokens or 0) if details is not None else 0
            st = TurnStat(c + 1, t + 1, r.usage.prompt_tokens, r.usage.completion_tokens, cached,
                          dt, swa_peak, full_peak, reply)
            res.turns.append(st)
            res.swa_used_peak = max(res.swa_used_peak, swa_peak)
            res.full_used_peak = max(res.full_used_peak, full_peak)
            log(f"{res.name}: conv {st.conv} turn {st.turn}: prompt {st.prompt_tokens}, "
                f"cached {st.cached_tokens}, completion {st.completion_tokens}, "
                f"SWA used peak {swa_peak:.0f}, full used peak {full_peak:.0f}, {dt:.2f} s")


def run_probes(srv: SglangServer, res: ArmResult, vocab: int) -> None:
    """From a flushed tree: a prompt, then one diverging from it at BRANCH_AT (inside a chunk);
    then a follow-up carrying FOLLOW_K decode islands of a still-running reply."""
    import random

    rng = random.Random(49)
    flush_cache_when_idle(srv)
    p = [rng.randrange(4, vocab) for _ in range(BRANCH_PROMPT)]
    srv.generate(p, 8)
    res.branch_cached = srv.generate(p[:BRANCH_AT] + [rng.randrange(4, vocab) for _ in range(40)],
                                     8).cached_tokens
    flush_cache_when_idle(srv)
    prompt = [rng.randrange(4, vocab) for _ in range(200)]
    fu = follow_up_while_running(srv, prompt, k=FOLLOW_K, delta=FOLLOW_DELTA, interval=CHUNK // 4,
                                 a_max_new=1000, abort_a=True, log=lambda *_: None)
    res.follow_up_output_hit = max(0, fu.b_cached_tokens - len(prompt))
    log(f"{res.name}: branch at {BRANCH_AT} of a {BRANCH_PROMPT}-token prompt: cached "
        f"{res.branch_cached}; follow-up at output token {fu.generated_at_send}: "
        f"{res.follow_up_output_hit} output tokens hit")


def run_arm(name: str, arm_args: list[str], model: pathlib.Path, a) -> ArmResult:
    args = (list(get_model(a.model).server_args) + DEMO_SERVER_ARGS
            + shlex.split(a.extra_server_args) + arm_args)
    res = ArmResult(name, args)
    log(f"{name}: booting sglang ({' '.join(arm_args) or 'no arm arguments'}) ...")
    t0 = time.monotonic()
    with SglangServer(model, args, omp_threads=a.omp_threads,
                      boot_timeout_s=a.boot_timeout) as srv:
        res.boot_s = srv.boot_s
        log(f"{name}: healthy at {srv.base_url} after {srv.boot_s:.1f} s "
            f"(pid {srv.pid}, log {srv.log_path})")
        m = fetch_metrics(srv.base_url)
        res.swa_pool, res.full_pool = float(m.pool_tokens("swa")), float(m.pool_tokens("kv"))
        pools = PoolPeaks(srv.log_path, res.swa_pool, res.full_pool)
        t_work = time.monotonic()
        run_chat(srv, pools, res, convs=a.convs, turns=a.turns, max_tokens=a.max_tokens)
        res.wall_s = time.monotonic() - t_work
        if not a.no_probes:
            run_probes(srv, res, a.vocab)
        res.final = {k.removeprefix("sglang:"): v for k, v in srv.metrics().items()
                     if k.startswith(("sglang:swa_", "sglang:kv_")) and k.endswith("_tokens")}
        log(f"{name}: stopping server pid {srv.pid}")
    log(f"{name}: stopped ({time.monotonic() - t0:.1f} s in all)")
    return res


def fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.2f}" if abs(v) < 100 and v != int(v) else f"{v:.0f}"
    return str(v)


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    cells = [header] + [[fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    for i, r in enumerate(cells):
        print("  ".join(c.ljust(w) if j == 0 else c.rjust(w)
                        for j, (c, w) in enumerate(zip(r, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def report(results: list[ArmResult]) -> None:
    names = [r.name for r in results]
    summary = [
        ["requests"] + [len(r.turns) for r in results],
        ["prompt tokens"] + [sum(t.prompt_tokens for t in r.turns) for r in results],
        ["completion tokens"] + [sum(t.completion_tokens for t in r.turns) for r in results],
        ["cached tokens"] + [sum(t.cached_tokens for t in r.turns) for r in results],
        ["cache hit %"] + [100.0 * sum(t.cached_tokens for t in r.turns)
                           / max(1, sum(t.prompt_tokens for t in r.turns)) for r in results],
        ["SWA pool (tokens)"] + [r.swa_pool for r in results],
        ["full pool (tokens)"] + [r.full_pool for r in results],
        ["SWA used, peak"] + [r.swa_used_peak for r in results],
        ["full used, peak"] + [r.full_used_peak for r in results],
        ["SWA used, end"] + [r.final.get("swa_used_tokens", 0.0) for r in results],
        ["SWA evictable, end"] + [r.final.get("swa_evictable_tokens", 0.0) for r in results],
        ["full evictable, end"] + [r.final.get("kv_evictable_tokens", 0.0) for r in results],
        [f"branch at {BRANCH_AT}: cached"] + [r.branch_cached for r in results],
        [f"follow-up at output {FOLLOW_K * CHUNK // 4 + FOLLOW_DELTA}: output hit"]
        + [r.follow_up_output_hit for r in results],
        ["boot to healthy (s)"] + [r.boot_s for r in results],
        ["workload wall (s)"] + [r.wall_s for r in results],
    ]
    print_table("Summary (tokens unless noted)", ["metric"] + names, summary)
    header = ["conv.turn", "prompt"]
    for n in names:
        header += [f"{n}:cached", f"{n}:SWA peak", f"{n}:full peak"]
    rows = []
    for i, t in enumerate(results[0].turns):
        row = [f"{t.conv}.{t.turn}", t.prompt_tokens]
        for r in results:
            u = r.turns[i]
            row += [u.cached_tokens, u.swa_used_peak, u.full_used_peak]
        rows.append(row)
    print_table("Per turn", header, rows)
    if len(results) > 1:
        same = all([t.reply for t in r.turns] == [t.reply for t in results[0].turns]
                   for r in results[1:])
        print(f"\nreplies identical across arms: {'yes' if same else 'NO'}")


def parse_arm(spec: str) -> tuple[str, list[str]]:
    name, sep, args = spec.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--arm expects NAME=ARGS, got {spec!r}")
    return name, shlex.split(args)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Multi-turn chat demo on the real SGLang server (CPU, tiny hybrid-SWA model), "
                    "then a branch inside a chunk and a follow-up on a running reply.",
        epilog="example: scripts/demo.sh --target 0.5.15.post1 --arm upstream= "
               "--arm 'islands=--enable-swa-islands'")
    ap.add_argument("--target", choices=sorted(TARGETS), default="0.5.23",
                    help="the sglang release this interpreter runs (default 0.5.23; demo.sh "
                         "picks the interpreter)")
    ap.add_argument("--model", choices=sorted(MODELS), default=None,
                    help="tiny model (default: gemma4 on 0.5.23, laguna on 0.5.15.post1)")
    ap.add_argument("--arm", action="append", type=parse_arm, metavar="NAME=ARGS",
                    help="an arm to run (repeatable; replaces the target's default arms: "
                         + "; ".join(f"{t}: {list(arms)}" for t, (_, arms) in TARGETS.items()) + ")")
    ap.add_argument("--no-probes", action="store_true",
                    help="skip the branch and follow-up probes after the chat")
    ap.add_argument("--extra-server-args", default="",
                    help="sglang arguments added to every arm, e.g. '--max-running-requests 4'")
    ap.add_argument("--convs", type=int, default=2, help="conversations (interleaved)")
    ap.add_argument("--turns", type=int, default=4, help="turns per conversation")
    ap.add_argument("--max-tokens", type=int, default=48, help="max completion tokens per turn")
    ap.add_argument("--omp-threads", type=int, default=2)
    ap.add_argument("--boot-timeout", type=float, default=300.0)
    ap.add_argument("--json", default=None, help="also write the results as JSON to this file")
    a = ap.parse_args(argv)
    default_model, target_arms = TARGETS[a.target]
    a.model = a.model or default_model
    if not get_model(a.model).serves_on(a.target):
        ap.error(f"--model {a.model} does not run on sglang {a.target} (it runs on "
                 f"{', '.join(get_model(a.model).targets)})")
    from importlib.metadata import version

    if version("sglang") != a.target:
        ap.error(f"this interpreter runs sglang {version('sglang')}, not {a.target}: run "
                 f"scripts/demo.sh --target {a.target}")
    arms = dict(a.arm) if a.arm else dict(target_arms)
    raise_keyboard_interrupt_on_signals()  # Ctrl-C / SIGTERM still stop the server by its PID

    t0 = time.monotonic()
    log(f"building (or reusing) the tiny {a.model} model ...")
    model = get_model(a.model).build(window=WINDOW)
    a.vocab = real_vocab(model)
    log(f"model {model} ready in {time.monotonic() - t0:.1f} s")
    results = [run_arm(name, args, model, a) for name, args in arms.items()]
    report(results)
    if a.json:
        out = {"command": [sys.executable, *sys.argv], "model": str(model), "target": a.target,
               "arms": [dataclasses.asdict(r) for r in results]}
        pathlib.Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
        log(f"results written to {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
