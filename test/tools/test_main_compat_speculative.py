"""The speculative-decoding kernels of the harness-only ``sgl_kernel`` stand-in (issue 58).

``islands_harness/main_compat/site/sgl_kernel/speculative.py`` stands in for the CPU kernels that
sglang 0.5.23's NGRAM, EAGLE and frozen-KV MTP workers import on CPU. Checked here:
- each kernel on a worked example whose answer is written out by hand (in this process);
- each kernel against the upstream Triton kernel it stands for (``reconstruct_tree.py``,
  ``spec_tree.py``, ``cache_locs.py``, ``eagle.py``), run by Triton's interpreter in
  ``.venv-main`` on random trees, batches and offsets: every output tensor equal.
Skips with ``test_main_compat.py`` when ``.venv-main`` does not exist.
"""

from __future__ import annotations

import textwrap

import pytest
import torch
from test_main_compat import run_reference, sk

spec = sk.speculative

# A draft tree of 5 nodes (node 0 the last verified token): 0 -> 1 -> 3, 0 -> 2, 1 -> 4.
# Row i marks i and its ancestors, as NGRAM's corpus writes the mask.
TREE = torch.tensor([
    [1, 0, 0, 0, 0],
    [1, 1, 0, 0, 0],
    [1, 0, 1, 0, 0],
    [1, 1, 0, 1, 0],
    [1, 1, 0, 0, 1],
], dtype=torch.bool)


def _reconstruct(mask: torch.Tensor, seq_lens: list[int], n: int):
    bs = len(seq_lens)
    out = [torch.full((bs * n,), -7, dtype=torch.int64) for _ in range(4)]
    spec.reconstruct_indices_from_tree_mask(mask.reshape(-1), torch.tensor(seq_lens), *out, bs, n)
    return [t.tolist() for t in out]


def test_reconstruct_gives_depths_first_children_and_next_siblings():
    positions, index, next_token, next_sibling = _reconstruct(TREE, [100], 5)
    assert positions == [100, 101, 101, 102, 102]  # committed length + depth
    assert index == [0, 1, 2, 3, 4]
    assert next_token == [1, 3, -1, -1, -1]  # 0's first child is 1, 1's is 3
    assert next_sibling == [-1, 2, -1, 4, -1]  # the root has none; 1 -> 2, 3 -> 4


def test_reconstruct_offsets_each_request_by_its_row():
    chain = torch.ones(3, 3, dtype=torch.bool).tril()
    positions, index, next_token, next_sibling = _reconstruct(
        torch.stack([chain, chain]), [5, 9], 3)
    assert positions == [5, 6, 7, 9, 10, 11]
    assert index == [0, 1, 2, 3, 4, 5]
    assert next_token == [1, 2, -1, 1, 2, -1]  # node ids within the request
    assert next_sibling == [-1] * 6


def _verify(candidates, target, steps=4):
    _, index, next_token, next_sibling = _reconstruct(TREE, [0], 5)
    predicts = torch.full((5,), -1, dtype=torch.int64)
    accept_index = torch.full((1, steps), -1, dtype=torch.int64)
    accepted = torch.zeros(1, dtype=torch.int64)
    spec.verify_tree_greedy_cpu(
        predicts=predicts, accept_index=accept_index, accept_token_num=accepted,
        candidates=torch.tensor([candidates]), retrive_index=torch.tensor([index]),
        retrive_next_token=torch.tensor([next_token]),
        retrive_next_sibling=torch.tensor([next_sibling]), target_predict=torch.tensor([target]))
    return predicts.tolist(), accept_index.tolist()[0], int(accepted)


def test_verify_greedy_follows_the_target_down_the_matching_branch():
    # The target predicts 20 after node 0, 40 after node 2: the walk takes sibling 2, then stops
    # (node 2 has no child); node 2's own prediction is the bonus token.
    predicts, accept_index, accepted = _verify([9, 10, 20, 30, 31], [20, 11, 40, 0, 0])
    assert (accepted, accept_index) == (1, [0, 2, -1, -1])
    assert predicts == [20, -1, 40, -1, -1]


def test_verify_greedy_accepts_a_whole_path_and_nothing_when_no_child_matches():
    predicts, accept_index, accepted = _verify([9, 10, 20, 30, 31], [10, 31, 0, 0, 77])
    assert (accepted, accept_index) == (2, [0, 1, 4, -1])
    assert predicts == [10, 31, -1, -1, 77]
    predicts, accept_index, accepted = _verify([9, 10, 20, 30, 31], [55, 0, 0, 0, 0])
    assert (accepted, accept_index, predicts) == (0, [0, -1, -1, -1], [55, -1, -1, -1, -1])


def test_cache_loc_gathers_and_the_accepted_slots():
    req_to_token = torch.arange(40, dtype=torch.int32).view(4, 10)
    out = torch.full((5,), -1, dtype=torch.int64)
    spec.assign_extend_cache_locs_cpu(torch.tensor([2, 0]), req_to_token, torch.tensor([3, 8]),
                                      torch.tensor([6, 10]), out, 10)
    assert out.tolist() == [23, 24, 25, 8, 9]
    draft = torch.full((4,), -1, dtype=torch.int64)
    spec.assign_draft_cache_locs_contiguous_cpu(torch.tensor([1, 3]), req_to_token,
                                                torch.tensor([4, 0]), draft, 10, 1, 2)
    assert draft.tolist() == [14, 15, 30, 31]
    accepted = torch.full((6,), -1, dtype=torch.int64)
    spec.fill_accept_out_cache_loc_cpu(torch.tensor([[0, 2, -1], [3, -1, -1]]),
                                       torch.tensor([50, 51, 52, 53, 54, 55]), accepted)
    assert accepted.tolist() == [50, 52, 53, -1, -1, -1]
    bonus = torch.zeros(2, dtype=torch.int64)
    spec.fill_bonus_tokens_cpu(torch.tensor([[7, 8, 9], [4, 5, 6]]), torch.tensor([2, 3]),
                               bonus, 3)
    assert bonus.tolist() == [8, 6]


def test_checks_and_refusals_name_the_problem():
    with pytest.raises(ValueError, match="pool_len"):
        spec.assign_extend_cache_locs_cpu(torch.tensor([0]), torch.zeros(1, 8, dtype=torch.int32),
                                          torch.tensor([0]), torch.tensor([1]),
                                          torch.zeros(1, dtype=torch.int64), 9)
    with pytest.raises(NotImplementedError, match="tree_mask_mode"):
        spec.build_tree_kernel_efficient_cpu(*[torch.zeros(1)] * 8, 1, 1, 2, 2)
    assert set(sk.SPECULATIVE) <= set(dir(sk)) and all(
        getattr(sk, name) is getattr(spec, name) for name in sk.SPECULATIVE)


# ---- against the upstream Triton kernels, in .venv-main (Triton interpreter) ----------------

REFERENCE_SCRIPT = textwrap.dedent(r"""
import json, random, torch
import sgl_kernel as sk
import sgl_kernel.speculative as sks
from sglang.kernels.ops.speculative.reconstruct_tree import reconstruct_indices_from_tree_mask_triton
from sglang.kernels.ops.speculative.spec_tree import sgl_build_tree_kernel_triton, verify_tree_greedy_triton, TreeMaskMode
from sglang.kernels.ops.speculative.cache_locs import assign_draft_cache_locs_contiguous, assign_extend_cache_locs
from sglang.kernels.ops.speculative.eagle import fill_accept_out_cache_loc, fill_bonus_tokens
from sglang.srt.utils import next_power_of_2
rng = random.Random(0)
g = torch.Generator().manual_seed(0)
res = []

def random_tree(n):
    # parent[i] < i for i>=1, node 0 root; ancestor mask incl. self
    par = [-1] + [rng.randrange(0, i) for i in range(1, n)]
    m = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j >= 0:
            m[i, j] = True; j = par[j]
    return m, par

for case in range(8):
    bs, n = rng.randrange(1, 5), rng.choice([1, 2, 4, 8, 5])
    mask = torch.stack([random_tree(n)[0] for _ in range(bs)]).reshape(-1)
    seq = torch.randint(1, 100, (bs,), generator=g)
    outs = []
    for fn in (sks.reconstruct_indices_from_tree_mask, reconstruct_indices_from_tree_mask_triton):
        t = [torch.full((bs * n,), -7, dtype=torch.int64) for _ in range(4)]
        fn(mask, seq, *t, bs, n)
        outs.append(t)
    res.append(("reconstruct", case, all(torch.equal(a, b) for a, b in zip(*outs))))

for case in range(8):
    bs, n = rng.randrange(1, 5), rng.choice([2, 4, 6])
    steps = rng.randrange(2, n + 1)
    trees = [random_tree(n) for _ in range(bs)]
    # retrieve structure through reconstruct
    mask = torch.stack([t[0] for t in trees]).reshape(-1)
    pos = torch.zeros(bs * n, dtype=torch.int64); ri = torch.zeros(bs, n, dtype=torch.int64)
    rn = torch.zeros(bs, n, dtype=torch.int64); rs = torch.zeros(bs, n, dtype=torch.int64)
    sks.reconstruct_indices_from_tree_mask(mask, torch.zeros(bs, dtype=torch.int64), pos, ri, rn, rs, bs, n)
    cand = torch.randint(0, 3, (bs, n), generator=g)
    target = torch.randint(0, 3, (bs, n), generator=g)
    outs = []
    for fn in (sk.verify_tree_greedy_cpu, None):
        p = torch.full((bs * n,), -1, dtype=torch.int64); ai = torch.full((bs, steps), -1, dtype=torch.int64)
        an = torch.zeros(bs, dtype=torch.int64)
        if fn is None:
            verify_tree_greedy_triton(p, ai, an, cand, ri, rn, rs, target)
        else:
            fn(predicts=p, accept_index=ai, accept_token_num=an, candidates=cand, retrive_index=ri,
               retrive_next_token=rn, retrive_next_sibling=rs, target_predict=target)
        outs.append((p, ai, an))
    res.append(("verify", case, all(torch.equal(a, b) for a, b in zip(*outs)), int(outs[0][2].sum())))

for case in range(8):
    bs, topk, depth = rng.randrange(1, 4), rng.choice([1, 2, 4]), rng.randrange(1, 4)
    n = rng.randrange(2, topk * depth + 2)
    mode = rng.choice([0, 1])
    seq = torch.randint(1, 9, (bs,), generator=g)
    scores = topk + (depth - 1) * topk * topk  # the score list selected_index points into
    n = min(n, scores + 1)
    parent = torch.randint(0, scores, (bs, (depth - 1) * topk + 1), generator=g)
    selected = torch.stack([torch.tensor(sorted(rng.sample(range(scores), n - 1))) for _ in range(bs)])
    # make some selected values map to parent positions
    outs = []
    for fn in ("cpu", "triton"):
        if mode == 0:
            tm = torch.ones(int((seq + n).sum() * n), dtype=torch.bool)
        else:
            tm = torch.ones(bs * n * n, dtype=torch.bool)
        pos = torch.zeros(bs * n, dtype=torch.int64)
        ri = torch.full((bs, n), -1, dtype=torch.int64); rn = ri.clone(); rs = ri.clone()
        args = (parent, selected, seq, tm, pos, ri, rn, rs, topk, depth, n)
        if fn == "cpu":
            sk.build_tree_kernel_efficient_cpu(*args, mode)
        else:
            sgl_build_tree_kernel_triton(*args, TreeMaskMode(mode))
        outs.append((tm, pos, ri, rn, rs))
    res.append(("build_tree", case, all(torch.equal(a, b) for a, b in zip(*outs))))

for case in range(6):
    bs, pool_len = rng.randrange(1, 5), rng.randrange(20, 60)
    topk, cols = rng.choice([1, 2]), rng.randrange(1, 5)
    req = torch.randint(0, 1000, (bs + 2, pool_len), generator=g, dtype=torch.int32)
    rows = torch.tensor(rng.sample(range(bs + 2), bs))
    seq = torch.tensor([rng.randrange(0, pool_len - topk * cols) for _ in range(bs)])
    a = torch.full((bs * topk * cols,), -1, dtype=torch.int64); b = a.clone()
    sk.assign_draft_cache_locs_contiguous_cpu(rows, req, seq, a, pool_len, topk, cols)
    assign_draft_cache_locs_contiguous[(bs,)](rows, req, seq, b, pool_len, topk, cols, BS=bs)
    res.append(("draft_locs", case, torch.equal(a, b)))

for case in range(6):
    bs, pool_len = rng.randrange(1, 5), rng.randrange(20, 60)
    req = torch.randint(0, 1000, (bs + 2, pool_len), generator=g, dtype=torch.int32)
    rows = torch.tensor(rng.sample(range(bs + 2), bs))
    starts = [rng.randrange(0, pool_len) for _ in range(bs)]
    ends = [rng.randrange(s, pool_len + 1) for s in starts]
    total = sum(e - s for s, e in zip(starts, ends))
    a = torch.full((total + 3,), -1, dtype=torch.int64); b = a.clone()
    sk.assign_extend_cache_locs_cpu(rows, req, torch.tensor(starts), torch.tensor(ends), a, pool_len)
    assign_extend_cache_locs[(bs,)](rows, req, torch.tensor(starts), torch.tensor(ends), b, pool_len, next_power_of_2(bs))
    res.append(("extend_locs", case, torch.equal(a, b)))

for case in range(6):
    bs, steps = rng.randrange(1, 5), rng.randrange(1, 6)
    ai = torch.full((bs, steps), -1, dtype=torch.int32)
    for r in range(bs):
        k = rng.randrange(1, steps + 1)
        ai[r, :k] = torch.tensor([r * steps + j for j in range(k)], dtype=torch.int32)
    loc = torch.randint(0, 999, (bs * steps,), generator=g)
    a = torch.full((bs * steps,), -1, dtype=torch.int64); b = a.clone()
    sk.fill_accept_out_cache_loc_cpu(ai, loc, a)
    size = ai.numel()
    fill_accept_out_cache_loc[(size,)](ai, loc, b, next_power_of_2(size))
    res.append(("accept_loc", case, torch.equal(a, b)))
    lens = torch.tensor([rng.randrange(1, steps + 1) for _ in range(bs)], dtype=torch.int32)
    toks = torch.randint(0, 999, (bs, steps), generator=g)
    a = torch.zeros(bs, dtype=torch.int64); b = a.clone()
    sk.fill_bonus_tokens_cpu(toks, lens, a, steps)
    fill_bonus_tokens[(bs,)](toks, lens, b, steps)
    res.append(("bonus", case, torch.equal(a, b)))
print(json.dumps(res))
""")


def test_speculative_standins_equal_upstream_triton_kernels_under_interpreter():
    results = run_reference(REFERENCE_SCRIPT)
    kinds = {r[0] for r in results}
    assert kinds == {"reconstruct", "verify", "build_tree", "draft_locs", "extend_locs",
                     "accept_loc", "bonus"}, kinds
    assert all(r[2] for r in results), [r for r in results if not r[2]]
    assert sum(r[3] for r in results if r[0] == "verify") > 0, "no verify case accepted a draft"
