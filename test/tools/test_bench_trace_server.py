"""benchmarks/trace_server.py without a server: the slice (whole conversations, the limit, the
context cap, compressed times, capped outputs), its scaling and token ids in the tiny model's
vocabulary, the checks between the arms and against the replay (a fake replay worker), the
markdown regenerating from the JSON, and the command line."""

import json
import pathlib
import subprocess
import sys

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(_ROOT / "benchmarks"))

import _bench_path  # noqa: E402,F401
from trace_replay import traces  # noqa: E402
from trace_server import compare, report  # noqa: E402
from trace_server import trace_slice as ts  # noqa: E402
from trace_server.cli import parse_args  # noqa: E402
from trace_server.serve import running_while_waiting  # noqa: E402

SPEC = ts.SliceSpec(limit=40, thin=64, time_factor=60.0, output_cap=16)


@pytest.fixture(scope="module")
def sliced(tmp_path_factory):
    path = ts.write_slice(SPEC, tmp_path_factory.mktemp("slice") / "slice.jsonl")
    return path, traces.load(traces.CONVERSATION)


def test_the_slice_keeps_whole_conversations_in_order_and_fits_the_context(sliced):
    path, full = sliced
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == SPEC.limit
    assert all(r["hash_ids"][1] % SPEC.thin == 0 for r in rows)
    picked = ts.select(full, SPEC.thin, SPEC.limit, SPEC.scale, SPEC.output_cap, SPEC.max_context)
    # every request of a kept conversation up to the last one kept, none skipped but too long
    last = picked[-1].index
    for r in full[:last + 1]:
        if len(r.hash_ids) > 1 and r.hash_ids[1] % SPEC.thin == 0:
            (s,) = traces.scale([r], SPEC.scale)
            fits = s.input_len + min(s.output_len, SPEC.output_cap) <= SPEC.max_context
            assert (r in picked) == fits
    # times from the first request, divided by the factor; outputs capped before scaling
    t0 = picked[0].t_ms
    assert [r["timestamp"] for r in rows] == [round((p.t_ms - t0) / 60) for p in picked]
    assert rows[0]["timestamp"] == 0
    assert [r["output_length"] for r in rows] == [min(p.output_len, 16 * 16) for p in picked]
    assert [r["input_length"] for r in rows] == [p.input_len for p in picked]


def test_scaling_gives_block_32_lengths_and_capped_outputs(sliced):
    path, _ = sliced
    reqs = ts.scaled(path, SPEC.scale)
    raw = traces.load(path)
    assert SPEC.block == 32
    for r, q in zip(reqs, raw):
        full, tail = divmod(q.input_len, 512)
        assert r.input_len == full * 32 + (-(-tail // 16) if tail else 0)
        assert 1 <= r.output_len <= SPEC.output_cap
        assert r.input_len + r.output_len <= SPEC.max_context
    st = ts.stats(reqs, SPEC.block)
    assert st["requests"] == SPEC.limit and st["max_output"] <= SPEC.output_cap
    assert 0.0 < st["no_forget_bound"] < 1.0  # conversations share their turns' prefixes


def test_token_ids_lie_in_the_real_vocabulary_and_equal_blocks_give_equal_tokens(sliced):
    path, _ = sliced
    reqs = ts.scaled(path, SPEC.scale)
    tm = ts.token_map(SPEC.block, vocab=683)
    toks = [tm.tokens(r) for r in reqs]
    assert all(len(t) == r.input_len for t, r in zip(toks, reqs))
    assert all(ts.TOKEN_LO <= x < 683 for t in toks for x in t)
    # the common first block is the same tokens in every request
    assert all(t[:32] == toks[0][:32] for t in toks)
    # a later turn of a conversation starts with its earlier turn's full blocks
    def shares(a, b):
        k = a.full_blocks(32)
        return k > 1 and b.hash_ids[:k] == a.hash_ids[:k]

    a, b = next((a, b) for i, a in enumerate(reqs) for b in reqs[i + 1:] if shares(a, b))
    n = a.full_blocks(32) * 32
    assert toks[reqs.index(b)][:n] == toks[reqs.index(a)][:n]


def test_outputs_equal_names_the_requests_and_first_tokens_that_differ():
    a = [[0, [1, 2, 3]], [5, [4, 5]], [0, [7]]]
    assert compare.outputs_equal(a, a) == {"requests": 3, "equal": 3, "all_equal": True,
                                           "differ": []}
    b = [[9, [1, 2, 3]], [5, [4, 6]], [0, [7, 8]]]
    o = compare.outputs_equal(a, b)  # the cached tokens do not count
    assert o["equal"] == 1 and not o["all_equal"] and o["differ"] == [[1, 1], [2, 1]]
    with pytest.raises(ValueError):
        compare.outputs_equal(a, b[:2])


def test_orders_agree_only_when_both_sides_order_the_arms_alike():
    assert compare.order(0.30, 0.20, 0.002) == ">" and compare.order(0.2, 0.2005, 0.002) == "="
    server = {"main": {"cached_share": 0.10, "running_mean": 8.0, "running_mean_waiting": 9.0},
              "main_islands": {"cached_share": 0.20, "running_mean": 8.02,
                               "running_mean_waiting": 10.0}}
    replay = {"main": {"cached_share": 0.12, "running_mean": 7.0, "running_mean_waiting": 12.0},
              "main_islands": {"cached_share": 0.25, "running_mean": 7.5,
                               "running_mean_waiting": 11.0}}
    o = compare.orders(server, replay)
    assert o["cached_share"]["agree"] and o["cached_share"]["server_order"] == ">"
    assert o["running_mean"]["server_order"] == "=" and o["running_mean"]["replay_order"] == ">"
    assert not o["running_mean"]["agree"] and not o["running_mean_waiting"]["agree"]


def test_running_while_waiting_weighs_the_samples_where_requests_wait():
    s = [{"t": 0.0, "running": 4, "queue": 0}, {"t": 1.0, "running": 8, "queue": 2},
         {"t": 3.0, "running": 16, "queue": 1}, {"t": 4.0, "running": 2, "queue": 0},
         {"t": 9.0, "running": 0, "queue": 0}]
    assert running_while_waiting(s) == round((8 * 2 + 16 * 1) / 3, 2)
    assert running_while_waiting(s[:1]) == 0.0


def _fake_cell(arm, spec):
    """What ``trace_replay.replay.run_cell`` returns, by arm."""
    cached = 1000 if arm == "main" else 2000
    return {"requests": 40, "input_tokens": 10_000, "cached_tokens": cached, "running_mean": 9.5,
            "running_max": 16, "running_mean_waiting": 12.0 if arm == "main" else 13.0,
            "waiting_max": 5, "retractions": 0, "prefill_tokens": 10_000 - cached,
            "model_time_s": 60.0, "busy_s": 55.0, "ttft_p50_s": 1.0, "ttft_p99_s": 3.0,
            "swa_cut_tokens": None if arm == "main" else 300, "wall_s": 1.0, "spec": spec}


def test_the_replay_runs_each_arm_on_the_slice_shape_and_the_servers_pools():
    seen = []
    out = compare.run_replay(["main", "main_islands"],
                             {"name": "0.17-eq", "full_pool": 65536, "swa_pool": 1825},
                             "x/slice.jsonl", 16, 0.05,
                             {"window": 32, "chunk": 512, "page": 1, "cap": 16}, 0,
                             run=lambda a, s: seen.append(s) or _fake_cell(a, s))
    assert [s["arm"]["name"] for s in seen] == ["main", "main_islands"]
    s = seen[1]
    assert s["arm"]["main"]["args"] == ["--enable-swa-islands"]
    assert s["shape"] == {"window": 32, "page": 1, "chunk": 512, "cap": 16}
    assert s["pool"] == {"name": "0.17-eq", "full_pool": 65536, "swa_pool": 1825}
    assert s["trace"] == {"path": "x/slice.jsonl", "limit": None, "minutes": None, "scale": 16}
    assert s["steptime"]["speed"] == 0.05 and s["steptime"]["window"] == 32
    assert out["main"]["cached_share"] == 0.1 and out["main_islands"]["cached_share"] == 0.2
    assert "spec" not in out["main"]


def _result():
    replay = compare.run_replay(["main", "main_islands"], {"name": "0.17-eq", "full_pool": 65536,
                                                          "swa_pool": 1825}, "s.jsonl", 16, 0.05,
                                {"window": 32, "chunk": 512, "page": 1, "cap": 16}, 0,
                                run=_fake_cell)

    def arm(share, run, wait, outs):
        return {"summary": {"requests": 2, "cached_share": share, "running_mean": run,
                            "running_mean_waiting": wait, "running_max": 16,
                            "running_mean_step": run, "retractions": 0, "max_queue": 3,
                            "latency_mean_s": 2.0, "wall_s": 30.0},
                "per_request": [[0, o] for o in outs]}

    server = {"main": arm(0.11, 9.0, 11.0, [[1, 2], [3]]),
              "main_islands": arm(0.22, 9.5, 12.5, [[1, 2], [4]])}
    return report.result_record(
        command="c", date="d", git_head="g", runtime_s=1.0,
        slice_spec={"trace": "t", "thin": 64, "limit": 2, "scale": 16, "time_factor": 60.0,
                    "output_cap": 64, "seed": 0},
        slice_stats={"requests": 2, "input_tokens": 100, "output_tokens": 3, "max_input": 60,
                     "max_output": 2, "span_s": 1.0, "no_forget_bound": 0.3},
        shape={"window": 32, "chunk": 512, "page": 1, "cap": 16},
        pool={"name": "0.17-eq", "ratio_equivalent": 0.17, "swa_pool": 1825, "full_pool": 65536,
              "bind_without_islands": 3.56},
        replay_speed=0.05, calibration={"busy_s_at_speed_1": 1.5, "server_wall_s": 30.0,
                                        "speed": 0.05},
        server=server, replay=replay,
        outputs=compare.outputs_equal(server["main"]["per_request"],
                                      server["main_islands"]["per_request"]),
        orders=compare.orders({a: server[a]["summary"] for a in server}, replay))


def test_the_markdown_is_a_function_of_the_json_and_says_what_differs():
    r = _result()
    md = report.to_markdown(r)
    assert md == report.to_markdown(json.loads(json.dumps(r)))
    assert "Outputs equal between the arms: 1 of 2 requests; differ" in md and "1@0" in md
    assert "| cached share of input tokens | 0.1100 | 0.2200 | islands > stock |" in md
    assert ("the stock arm's 1.50 busy model seconds at speed 1 over the server stock arm's "
            "30.0 s") in md
    assert "| mean running while requests wait | 11.00 | 12.50 | islands > stock |" in md
    # the fake replay runs both arms at 9.5: a tie there, an order on the server
    assert "islands > stock | 9.50 | 9.50 | islands = stock | no |" in md


def test_from_json_renders_without_running(tmp_path):
    j = tmp_path / "r.json"
    j.write_text(json.dumps(_result()))
    subprocess.run([sys.executable, str(_ROOT / "benchmarks" / "trace_server.py"), "--from-json",
                    str(j), "--md", str(tmp_path / "r.md")], check=True, capture_output=True)
    assert (tmp_path / "r.md").read_text() == report.to_markdown(_result())


def test_the_command_line_checks_its_numbers():
    a = parse_args([])
    assert (a.thin, a.limit, a.scale, a.pool, a.replay_speed) == (64, 96, 16, "0.17-eq", 0.05)
    assert parse_args(["--replay-speed", "auto"]).replay_speed == "auto"
    for bad in (["--scale", "7"], ["--limit", "0"], ["--time-factor", "0"], ["--pool", "0.32"],
                ["--replay-speed", "fast"], ["--replay-speed", "0"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
