"""The trace server's result: the JSON record (``result_record``) and its markdown
(``to_markdown``, a function of the JSON alone, so a committed markdown regenerates byte for
byte)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from trace_server.compare import ISLANDS, METRICS, STOCK, list_differ

LABELS = {STOCK: "0.5.23 stock", ISLANDS: "0.5.23 islands"}
METRIC_LABELS = {"cached_share": "cached share of input tokens",
                 "running_mean": "mean running requests",
                 "running_mean_waiting": "mean running while requests wait"}


def result_record(*, command: str, date: str, git_head: str, runtime_s: float,
                  slice_spec: Dict[str, Any], slice_stats: Dict[str, Any], shape: Dict[str, int],
                  pool: Dict[str, Any], replay_speed: float,
                  calibration: Optional[Dict[str, Any]], server: Dict[str, Dict[str, Any]],
                  replay: Dict[str, Dict[str, Any]], outputs: Dict[str, Any],
                  orders: Dict[str, Any]) -> Dict[str, Any]:
    """The JSON of a run: the slice and its stats, the shape and pool, each arm's server record
    (``serve.serve_arm``) and replay summary, the output check and the orders."""
    return {"command": command, "date": date, "git_head": git_head, "runtime_s": runtime_s,
            "slice": slice_spec, "slice_stats": slice_stats, "shape": shape, "pool": pool,
            "replay_speed": replay_speed, "calibration": calibration, "arms": [STOCK, ISLANDS],
            "server": server, "replay": replay, "outputs": outputs, "orders": orders}


def _f(x: Any, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return f"{x:,}" if isinstance(x, int) else str(x)


def _row(cells: List[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def to_markdown(r: Dict[str, Any]) -> str:
    """The run's tables: the slice, the server per arm, the replay per arm, the orders."""
    sl, st, sh, pool = r["slice"], r["slice_stats"], r["shape"], r["pool"]
    out = ["# The same traffic on a real server, scaled down (issue 60 item 3)", "",
           f"Command: `{r['command']}`  ", f"Date: {r['date']}, git `{r['git_head']}`, "
           f"run time {r['runtime_s']:.0f} s (both boots and both replay cells).", "",
           "## The slice", "",
           f"The trace `{sl['trace']}`: the conversations whose second block's hash id is 0 mod "
           f"{sl['thin']} (every request shares the first block), the first {sl['limit']} "
           f"requests; lengths divided by {sl['scale']} (block {512 // sl['scale']} tokens), "
           f"outputs capped at {sl['output_cap']} tokens, arrival times divided by "
           f"{_f(sl['time_factor'], 0)}. Token ids: `TokenMap` over the tiny model's real "
           f"vocabulary (equal hash ids, equal tokens).", "",
           "| requests | input tokens | output tokens | longest input | longest output | "
           "span (s) | no-forget bound |", "|---:|---:|---:|---:|---:|---:|---:|",
           _row([st["requests"], _f(st["input_tokens"]), _f(st["output_tokens"]),
                 _f(st["max_input"]), _f(st["max_output"]), _f(st["span_s"], 1),
                 _f(st["no_forget_bound"], 4)]), "",
           f"Shape: window {sh['window']}, page {sh['page']}, chunk {sh['chunk']}, "
           f"`--max-running-requests` {sh['cap']}, full pool {_f(pool['full_pool'])} tokens, "
           f"SWA pool {_f(pool['swa_pool'])} tokens (`{pool['name']}`: the production's "
           f"ratio {pool['ratio_equivalent']} carried to this shape, stock's bind without islands "
           f"{pool['bind_without_islands']} requests).", "",
           "## The server (tiny Gemma 4 on CPU, greedy)", "",
           "| arm | requests | cached share | mean running | while waiting | max running | mean "
           "running (decode steps) | retractions | max queue | mean latency (s) | wall (s) |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for a in r["arms"]:
        s = r["server"][a]["summary"]
        out.append(_row([LABELS[a], s["requests"], _f(s["cached_share"], 4),
                         _f(s["running_mean"]), _f(s["running_mean_waiting"]),
                         s["running_max"], _f(s["running_mean_step"]),
                         s["retractions"], s["max_queue"], _f(s["latency_mean_s"]),
                         _f(s["wall_s"], 1)]))
    o = r["outputs"]
    out += ["", f"Outputs equal between the arms: {o['equal']} of {o['requests']} requests"
            + ("." if o["all_equal"] else
               f"; differ (request@first differing token): {list_differ(o['differ'])}."), "",
            f"## The in-process replay (`trace_replay`, speed {_f(r['replay_speed'], 3)})", "",
            "The same slice file, shape and pools on each arm's real tree cache and admission, in "
            "model time (the step-time model at the given speed"
            + (f": `--replay-speed auto`, the stock arm's {_f(c['busy_s_at_speed_1'], 2)} busy "
               f"model seconds at speed 1 over the server stock arm's {_f(c['server_wall_s'], 1)} "
               "s of traffic" if (c := r.get("calibration")) else "") + ").", "",
            "| arm | requests | cached share | mean running | while waiting | max running | "
            "retractions | model time (s) | wall (s) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for a in r["arms"]:
        s = r["replay"][a]
        out.append(_row([LABELS[a], s["requests"], _f(s["cached_share"], 4),
                         _f(s["running_mean"]), _f(s["running_mean_waiting"]), s["running_max"],
                         s["retractions"],
                         _f(s["model_time_s"], 1), _f(s["wall_s"], 1)]))
    out += ["", "## Islands against stock: server and replay", "",
            "| metric | server stock | server islands | server order | replay stock | "
            "replay islands | replay order | agree |",
            "|---|---:|---:|:---:|---:|---:|:---:|:---:|"]
    for m in r["orders"]:
        x = r["orders"][m]
        d = 4 if m == "cached_share" else 2
        out.append(_row([METRIC_LABELS[m], _f(x["server"][STOCK], d), _f(x["server"][ISLANDS], d),
                         f"islands {x['server_order']} stock", _f(x["replay"][STOCK], d),
                         _f(x["replay"][ISLANDS], d), f"islands {x['replay_order']} stock",
                         "yes" if x["agree"] else "no"]))
    out += ["", "Order: `>` islands above stock by more than the tolerance (cached share "
            f"{METRICS['cached_share']}, running {METRICS['running_mean']}), `<` below, `=` "
            "within it. Mean running: time-weighted over the traffic (server: `/metrics` "
            "samples from the first request to the last answer; replay: model time); while "
            "requests wait: over the time some request waits.", ""]
    return "\n".join(out)
