"""benchmarks/trace_replay/traces.py: a Mooncake-format trace read and checked line by line, its
block hashes turned into token ids (equal ids for equal hashes, a request's tail its own), scaled
for the CPU server, and the trace's no-forget bound (the README's 0.374 on the conversation
trace)."""

import json
import pathlib
import sys

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(_ROOT / "benchmarks"))

from trace_replay import traces  # noqa: E402

SHARED = _ROOT.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"


def _write(tmp_path, rows) -> pathlib.Path:
    p = tmp_path / "t.jsonl"
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return p


ROWS = [
    {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]},
    {"timestamp": 7, "input_length": 1024, "output_length": 9, "hash_ids": [0, 1]},
    {"timestamp": 3, "input_length": 600, "output_length": 2, "hash_ids": [0, 3]},
    {"timestamp": 9, "input_length": 1536, "output_length": 4, "hash_ids": [4, 1, 2]},
]


def test_requests_come_in_arrival_order_and_slice_by_count_or_minutes(tmp_path):
    rs = traces.load(_write(tmp_path, ROWS))
    assert [r.t_ms for r in rs] == [0, 3, 7, 9] and [r.index for r in rs] == [0, 1, 2, 3]
    assert len(traces.load(_write(tmp_path, ROWS), limit=2)) == 2
    late = dict(ROWS[0], timestamp=61_000)
    assert len(traces.load(_write(tmp_path, ROWS + [late]), minutes=1)) == 4


def test_equal_hashes_are_equal_tokens_and_tails_are_each_requests_own(tmp_path):
    a, b, c, d = traces.load(_write(tmp_path, ROWS))  # arrival order: 0, 3 (600), 7, 9
    m = traces.TokenMap(low=5, high=50_000, seed=1)
    ta, tb, tc, td = (m.tokens(r) for r in (a, b, c, d))
    assert [len(t) for t in (ta, tb, tc, td)] == [1100, 600, 1024, 1536]
    assert ta[:1024] == tc  # hash 0, 1
    assert ta[:512] == tb[:512] and tb[512:] != ta[512:600]  # 600's tail is not block 3
    assert td[512:1024] == ta[512:1024] and td[:512] != ta[:512]
    assert ta[1024:] != td[1024:1100]  # hash 2 is a tail in a: its own tokens
    assert min(min(t) for t in (ta, tb, tc, td)) >= 5 and max(max(t) for t in (ta, td)) < 50_000
    assert traces.TokenMap(low=5, high=50_000, seed=2).tokens(a) != ta
    assert m.tokens(a) == ta  # deterministic


def test_the_bound_counts_leading_blocks_seen_before(tmp_path):
    rs = traces.load(_write(tmp_path, ROWS))
    # 600: block 0 (512); 1024: blocks 0, 1 (1024); 1536: none (hash 4 first)
    assert traces.no_forget_bound(rs) == pytest.approx((512 + 1024) / (1100 + 600 + 1024 + 1536))


def test_scaling_keeps_the_blocks_and_their_sharing(tmp_path):
    rs = traces.scale(traces.load(_write(tmp_path, ROWS)), 16)
    assert [r.input_len for r in rs] == [2 * 32 + 5, 32 + 6, 64, 96]
    assert [r.output_len for r in rs] == [1, 1, 1, 1]
    m = traces.TokenMap(block=32, low=3, high=683)
    assert m.tokens(rs[0])[:64] == m.tokens(rs[2])
    assert traces.no_forget_bound(rs, block=32) == pytest.approx((32 + 64) / (69 + 38 + 64 + 96))
    with pytest.raises(ValueError, match="must divide 512"):
        traces.scale(rs, 3)


@pytest.mark.parametrize("line, message", [
    ("{not json", "not JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 1}', "missing 'hash_ids'"),
    ('{"timestamp": -1, "input_length": 10, "output_length": 1, "hash_ids": [0]}',
     "timestamp must be a non-negative integer"),
    ('{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}', "at least 1"),
    ('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [0]}',
     "1 hash_ids for input_length 600"),
    ('{"timestamp": 0, "input_length": 6, "output_length": 1, "hash_ids": ["a"]}',
     "hash_ids must be a list of non-negative integers"),
])
def test_a_bad_line_is_named_with_its_file_and_line(tmp_path, line, message):
    p = _write(tmp_path, [ROWS[0], line])
    with pytest.raises(traces.TraceError, match=message) as e:
        traces.load(p)
    assert f"{p}:2" in str(e.value)


def test_an_empty_slice_is_an_error(tmp_path):
    with pytest.raises(traces.TraceError, match="no requests"):
        traces.load(_write(tmp_path, [dict(ROWS[0], timestamp=120_000)]), minutes=1)


def test_the_committed_conversation_trace_reads_whole_with_its_readme_bound():
    rs = traces.load(traces.CONVERSATION)
    assert len(rs) == 12_031 and rs[-1].t_ms < 3_600_000
    assert round(traces.no_forget_bound(rs, partial=True), 3) == 0.374  # the README's figure
    assert round(traces.no_forget_bound(rs), 3) == 0.373  # tails are each request's own


@pytest.mark.skipif(not SHARED.exists(), reason="no ../shared/traces/mooncake")
def test_the_committed_copy_is_the_shared_trace():
    assert traces.load(traces.CONVERSATION) == traces.load(SHARED)
