"""SWAIslandRadixCache at chunk commit, on the real tree, pools, allocator, Req, ScheduleBatch and
PrefillAdder (islands_harness.sim drives them with the scheduler's glue; no model runs)."""

import random
from array import array

import pytest
import torch

from islands_harness.invariants import (
    check_invariants,
    req_hold,
    req_locked_swa,
    req_private_swa,
    tree_nodes,
)
from islands_harness.sim import MiniScheduler, random_prompt
from islands_harness.stack import build_stack
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, MatchPrefixParams
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandRadixCache
from sglang.srt.mem_cache.swa_radix_cache import SWARadixCache

BIG = 10**9


def evict_all(stack):
    stack.tree.evict(EvictParams(num_tokens=BIG, swa_num_tokens=BIG))


def assert_pools_back_to_baseline(stack):
    evict_all(stack)
    stack.tree.sanity_check()
    assert stack.free_sizes() == stack.initial_free
    assert stack.tree.total_size() == (0, 0)


class CommitProbe:
    """Records the hold of the committing request right after every chunk commit."""

    def __init__(self, stack, sched):
        self.stack, self.sched, self.rows = stack, sched, []
        sched.on_event = self

    def __call__(self, label, reqs):
        if label not in ("chunk_commit", "last_chunk_commit"):
            return
        check_invariants(self.stack, self.sched.running + reqs)
        for r in reqs:
            self.rows.append(
                dict(
                    rid=r.rid,
                    L=r.extend_range.end,
                    locked=req_locked_swa(self.stack, r),
                    private=req_private_swa(self.stack, r),
                    tree_swa_evictable=self.stack.tree.swa_evictable_size(),
                )
            )


def run_workload(stack, prompts, max_new=24, max_running=8, check_every_step=True):
    sched = MiniScheduler(stack, max_running=max_running)
    probe = CommitProbe(stack, sched)
    for i, p in enumerate(prompts):
        sched.submit(f"r{i}", p, max_new)
    after = (lambda: check_invariants(stack, sched.running)) if check_every_step else None
    sched.run(after_step=after)
    assert len(sched.finished) == len(prompts)
    return sched, probe


# ---- selection ---------------------------------------------------------------------------------


def test_flag_off_builds_exactly_swa_radix_cache_and_on_builds_islands():
    assert type(build_stack(islands=False).tree) is SWARadixCache
    assert type(build_stack(islands=True).tree) is SWAIslandRadixCache


# ---- hold after every chunk commit -------------------------------------------------------------


@pytest.mark.parametrize("page", [1, 16])
def test_hold_after_each_commit_is_window_plus_page_one_request(page):
    stack = build_stack(window=64, chunk=256, page=page)
    w = 65  # Laguna HF window 64: a token reads [i - 64, i], 65 tokens (sliding_window_size + 1)
    rng = random.Random(0)
    _, probe = run_workload(stack, [random_prompt(rng, 1024)])
    commits = [r for r in probe.rows if r["rid"] == "r0"]
    assert len(commits) == 4  # 1024 / 256
    for row in commits:
        assert row["locked"] <= w + 2 * page, row  # the island (floor_p(L) - t <= w + 2p - 1)
        assert row["locked"] >= w, row  # and never shorter than a window
        assert row["private"] <= page, row  # unaligned tail only
        assert row["tree_swa_evictable"] == 0, row  # dead SWA: none
    assert_pools_back_to_baseline(stack)


def test_upstream_holds_a_whole_chunk_islands_do_not():
    rng = random.Random(0)
    prompt = random_prompt(rng, 1024)
    held = {}
    for islands in (False, True):
        stack = build_stack(window=64, chunk=256, islands=islands)
        _, probe = run_workload(stack, [prompt])
        held[islands] = (
            max(r["locked"] for r in probe.rows),
            max(r["tree_swa_evictable"] for r in probe.rows),
        )
    assert held[False] == (256, 768)  # upstream: the last chunk locked, earlier chunks dead
    assert held[True][0] <= 66 and held[True][1] == 0


def test_hold_per_request_with_concurrent_requests():
    stack = build_stack(window=32, chunk=128, full_pool=32768, swa_pool=8192)
    rng = random.Random(1)
    prompts = [random_prompt(rng, n) for n in (700, 520, 390, 999)]
    sched, probe = run_workload(stack, prompts, max_new=40)
    w = 33  # HF window 32
    for row in probe.rows:
        assert row["locked"] <= w + 1 and row["private"] <= 1, row
    # all four requests produced chunk islands
    assert {r["rid"] for r in probe.rows} == {"r0", "r1", "r2", "r3"}
    assert stack.tree.stats.chunk_islands >= sum((n // 128) for n in (700, 520, 390, 999))
    assert_pools_back_to_baseline(stack)


def test_hold_during_decode_stays_bounded():
    stack = build_stack(window=32, chunk=128)
    rng = random.Random(2)
    sched = MiniScheduler(stack)
    reqs = [sched.submit(f"r{i}", random_prompt(rng, 600), 300) for i in range(3)]
    interval = 32  # cp / 4
    w, p = 33, 1  # HF window 32; page 1
    worst = 0

    def after():
        nonlocal worst
        check_invariants(stack, sched.running)
        for r in sched.running:
            if r.output_ids:  # decoding
                slack = r.kv_committed_len - r.cache_protected_len
                assert req_hold(stack, r) <= w + 2 * p + slack, (r.rid, req_hold(stack, r))
                assert slack <= interval
                worst = max(worst, req_hold(stack, r))

    sched.run(after_step=after)
    assert worst <= w + 2 * p + interval
    assert_pools_back_to_baseline(stack)


# ---- structure ---------------------------------------------------------------------------------


def _path(tree, node):
    out = []
    while node is not tree.root_node:
        out.append(node)
        node = node.parent
    return list(reversed(out))


def test_structure_after_commits_is_tombstones_then_one_live_island():
    stack = build_stack(window=32, chunk=128)
    rng = random.Random(3)
    prompt = random_prompt(rng, 640)
    sched = MiniScheduler(stack)
    req = sched.submit("a", prompt, 4)
    seen = []

    def on_event(label, reqs):
        if label in ("chunk_commit", "last_chunk_commit"):
            path = _path(stack.tree, req.last_node)
            t = {128: 94, 256: 222, 384: 350, 512: 478, 640: 606}[req.extend_range.end]  # L - 34
            pos, kinds = 0, []
            for n in path:
                kinds.append(("T" if n.swa_tombstone else "L", pos, pos + len(n.value)))
                pos += len(n.value)
            # everything below t is tombstone, everything from t is live, and t is a node boundary
            assert all(k == "T" for k, a, b in kinds if b <= t), kinds
            assert all(k == "L" for k, a, b in kinds if a >= t), kinds
            assert any(a == t for k, a, b in kinds), kinds
            assert pos == req.cache_protected_len == req.extend_range.end
            seen.append(len(kinds))

    sched.on_event = on_event
    sched.run()
    assert len(seen) == 5
    assert_pools_back_to_baseline(stack)


def test_reserved_prompt_matches_to_the_last_island_and_upstream_rule_holds():
    stack = build_stack(window=32, chunk=128)
    rng = random.Random(4)
    prompt = random_prompt(rng, 700)
    sched, _ = run_workload(stack, [prompt], max_new=8)
    tree = stack.tree
    m = tree.match_prefix(MatchPrefixParams(key=RadixKey(array("q", prompt), None)))
    assert len(m.device_indices) == len(prompt)
    # every match end has its preceding window live (or reaches back to the root live)
    mapping = stack.allocator.full_to_swa_index_mapping
    for cut in range(1, len(prompt) + 9, 7):
        key = (list(prompt) + list(sched.finished[0].output_ids))[:cut]
        m = tree.match_prefix(MatchPrefixParams(key=RadixKey(array("q", key), None)))
        n = len(m.device_indices)
        if n == 0:
            continue
        lo = max(0, n - tree.sliding_window_size)
        assert bool((mapping[m.device_indices[lo:n]] > 0).all()), (cut, n)
    assert_pools_back_to_baseline(stack)


# ---- conservation and shapes -------------------------------------------------------------------


@pytest.mark.parametrize(
    "window, page, chunk, prompt_lens",
    [
        (32, 1, 128, [700, 300, 64]),
        (40, 16, 128, [700, 301, 50]),  # window not a multiple of the page
        (32, 16, 200, [650, 333]),  # chunk not a multiple of the page
        (64, 64, 256, [1100, 700]),
        (32, 1, 1024, [300, 200]),  # prompts shorter than one chunk
    ],
)
def test_conservation_and_invariants_across_shapes(window, page, chunk, prompt_lens):
    stack = build_stack(window=window, page=page, chunk=chunk, full_pool=32768, swa_pool=16384)
    rng = random.Random(window * page + chunk)
    shared = random_prompt(rng, 400)
    prompts = [shared[: n // 2] + random_prompt(rng, n - n // 2) for n in prompt_lens]
    prompts.append(list(prompts[0]))  # exact repeat
    run_workload(stack, prompts, max_new=20)
    assert stack.tree.stats.freed_at_commit > 0
    assert_pools_back_to_baseline(stack)


def test_second_request_matches_into_first_tombstoned_path_while_first_runs():
    stack = build_stack(window=32, chunk=128)
    rng = random.Random(5)
    prompt = random_prompt(rng, 512)
    sched = MiniScheduler(stack)
    a = sched.submit("a", prompt, 200)
    b = None
    seen_at_admission = None
    while True:
        kind = sched.step()
        check_invariants(stack, sched.running)
        if b is None and len(a.output_ids) >= 10:
            # A is decoding; B re-sends A's prompt plus a new suffix
            b = sched.submit("b", list(prompt) + random_prompt(rng, 100), 20)
        elif b is not None and seen_at_admission is None and b.req_pool_idx is not None:
            # B was admitted this step: A still runs, and A's prompt path is tombstones up to
            # its prompt island [512 - 66, 512) (frontier floor(512 - 33 - 1) = 478; the commit
            # at 384 left [0, 350) as tombstones, the final commit [350, 478))
            path, node = [], a.last_node
            while node is not stack.tree.root_node:
                path.append(node)
                node = node.parent
            pos, dead = 0, 0
            for n in reversed(path):
                if pos + len(n.value) <= 478:
                    dead += len(n.value) if n.swa_tombstone else 0
                pos += len(n.value)
            seen_at_admission = (a in sched.running, dead)
        if kind is None and sched.idle():
            break
    assert seen_at_admission is not None
    a_running, dead = seen_at_admission
    assert a_running, "A had finished when B was admitted"
    assert dead == 478, "A's prompt below its frontier was not tombstoned"
    # B matched A's prompt island while A was still running: its whole prompt was cached
    assert b.cached_tokens == 512
    assert_pools_back_to_baseline(stack)


# ---- failure paths -----------------------------------------------------------------------------


def test_abort_mid_chunk_loses_nothing():
    stack = build_stack(window=32, chunk=128)
    rng = random.Random(6)
    sched = MiniScheduler(stack)
    a = sched.submit("a", random_prompt(rng, 900), 10)
    other = sched.submit("b", random_prompt(rng, 200), 30)
    for _ in range(3):
        sched.step()
        check_invariants(stack, sched.running)
    assert sched.chunked_req is a and a.cache_protected_len > 0
    sched.abort_chunked()
    check_invariants(stack, sched.running)
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    assert other.finished() and len(other.output_ids) == 30
    assert_pools_back_to_baseline(stack)


def test_retraction_with_islands_then_rerun():
    stack = build_stack(window=32, chunk=128)
    rng = random.Random(7)
    sched = MiniScheduler(stack)
    reqs = [sched.submit(f"r{i}", random_prompt(rng, 300), 60) for i in range(3)]
    while not (len(sched.running_batch.reqs) == 3 and all(r.output_ids for r in reqs)):
        sched.step()
    for _ in range(5):
        sched.step()
    assert sched.retract_all_but_one() >= 1
    check_invariants(stack, sched.running)
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    assert all(len(r.output_ids) == 60 for r in reqs)
    assert_pools_back_to_baseline(stack)


def test_swa_pressure_eviction_keeps_invariants():
    # a small SWA pool: LRU eviction must run between islands
    stack = build_stack(window=32, chunk=128, full_pool=16384, swa_pool=700)
    rng = random.Random(8)
    prompts = [random_prompt(rng, 500) for _ in range(6)]
    sched, _ = run_workload(stack, prompts, max_new=30, max_running=4)
    assert_pools_back_to_baseline(stack)


# ---- double frees ------------------------------------------------------------------------------


@pytest.mark.parametrize("page", [1, 16])
def test_double_frees_are_structurally_impossible(page):
    """The SWA of a tree node is freed only as the node turns into a tombstone
    (``_tombstone_swa``: live -> tombstone, once) or with the full KV of a deleted leaf; the
    allocator's sync-free page free has no ``> 0`` filter and no ``unique``. Try to break that:

    - twins (one prompt, one prefill batch): the second one's chunk commit deduplicates into the
      first one's nodes (the insert frees the duplicate slots, full and SWA);
    - two requests with the same prompt decode the same tokens (the synthetic next token depends
      only on the output length); the second trails by more than ``w + p``, so its decode islands
      deduplicate into the first one's nodes below their frontier;
    - committing the same chunk twice frees nothing;
    - re-freeing tombstoned pages, or a live page listed twice, is refused by the allocator's
      debug check before anything changes.
    ``SGLANG_DEBUG_MEMORY_POOL=1`` (conftest) makes every page free assert live, page-aligned,
    listed once; ``check_invariants`` checks both free lists after every step.
    """
    # cp 512: decode islands every 128 tokens > w + p, so an island insert reaches below its frontier
    stack = build_stack(window=32, page=page, chunk=512, full_pool=32768, swa_pool=16384)
    tree, alloc = stack.tree, stack.allocator
    assert alloc.debug_mode, "conftest sets SGLANG_DEBUG_MEMORY_POOL=1"
    dedup = []
    insert = tree.insert

    def observe_insert(params):  # observation only: the real insert runs
        result = insert(params)
        if result.prefix_len > params.prev_prefix_len:
            dedup.append((params.prev_prefix_len, result.prefix_len))
        return result

    tree.insert = observe_insert
    rng = random.Random(9)
    sched = MiniScheduler(stack, max_running=4)
    # twins in one prefill batch: the second one's commit deduplicates into the first one's nodes
    short = random_prompt(rng, 300)
    twins = [sched.submit("t1", short, 40), sched.submit("t2", list(short), 40)]
    sched.step()
    sched.step()
    assert dedup, "no twin dedup"
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    assert twins[0].output_ids == twins[1].output_ids

    prompt = random_prompt(rng, 1200)
    a = sched.submit("a", prompt, 700)
    sched.step()
    sched.step()  # the scheduler commits chunk 1 when it schedules chunk 2
    assert sched.chunked_req is a and a.cache_protected_len > 0
    # commit the chunk that just ran (chunk 2) ahead of the scheduler; committing it again, here
    # and then by the scheduler's own next step, frees nothing
    tree.cache_unfinished_req(a, chunked=True)
    before = stack.free_sizes()
    tree.cache_unfinished_req(a, chunked=True)
    assert stack.free_sizes() == before
    check_invariants(stack, sched.running + [a])
    while len(a.output_ids) < 300:
        sched.step()
        check_invariants(stack, sched.running)
    # B trails A by > w + p tokens: its decode islands deduplicate below their frontier
    n_dedup = len(dedup)
    b = sched.submit("b", list(prompt), 300)
    while len(b.output_ids) < 200:
        sched.step()
        check_invariants(stack, sched.running)
    # a decode island of B (past its 1200-token prompt) deduplicated into A's nodes
    assert any(prev >= 1200 for prev, _ in dedup[n_dedup:]), dedup[n_dedup:]

    tombstones = [n for n in tree_nodes(tree) if n.swa_tombstone]
    assert tombstones
    before = stack.free_sizes()
    # re-freeing tombstoned pages (duplicates inside one call included) is refused, unchanged
    starts = torch.cat([n.value[::page] for n in tombstones])
    for bad in (starts, torch.cat([starts, starts])):
        with pytest.raises(AssertionError):
            alloc.free_swa_pages(bad)
        assert stack.free_sizes() == before
    # a live page listed twice is refused too
    live = next(n for n in tree_nodes(tree) if not n.swa_tombstone and n.value.numel())
    with pytest.raises(AssertionError, match="twice"):
        alloc.free_swa_pages(torch.cat([live.value[:page:page]] * 2))
    assert stack.free_sizes() == before
    check_invariants(stack, sched.running)
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    assert list(a.output_ids[: len(b.output_ids)]) == list(b.output_ids)
    assert_pools_back_to_baseline(stack)


@pytest.mark.parametrize("need_sort", [False, True])
@pytest.mark.parametrize("page", [1, 16])
def test_allocator_page_free_matches_upstream_free_swa(page, need_sort):
    """``SWATokenToKVPoolAllocator.free_swa_pages`` leaves the allocator exactly as
    ``free_swa`` does (same free pages in the same list, same mapping), on live whole pages; so
    do several calls in one free group (``swa_free_group_begin/end``, an eviction's frees),
    which hand the pages to the free list only at the group's end."""
    states = []
    for mode in ("free_swa", "pages", "grouped"):
        stack = build_stack(window=32, page=page, chunk=128, islands=False, need_sort=need_sort)
        alloc = stack.allocator
        sched = MiniScheduler(stack)
        r = sched.submit("r", random_prompt(random.Random(3), 96), 5)
        sched.step()
        row = stack.req_to_token_pool.req_to_token[r.req_pool_idx, : 96].to(torch.int64)
        span = row[16:80]
        sub = alloc.swa_attn_allocator
        if mode == "pages":
            assert alloc.free_swa_pages(span[::page].clone()) == 64
        elif mode == "grouped":
            available = alloc.swa_available_size()
            alloc.swa_free_group_begin()
            with pytest.raises(AssertionError, match="nest"):
                alloc.swa_free_group_begin()
            assert alloc.free_swa_pages(span[: 32 : page].clone()) == 32
            assert alloc.free_swa_pages(span[32::page].clone()) == 32
            assert alloc.swa_available_size() == available  # not on the free list yet
            alloc.swa_free_group_end()
            assert alloc.swa_available_size() == available + 64
        else:
            alloc.free_swa(span)
        states.append((sorted(sub.free_pages.tolist()), sorted(sub.release_pages.tolist()),
                       alloc.full_to_swa_index_mapping.clone()))
    for other in states[1:]:
        assert states[0][:2] == other[:2]
        assert torch.equal(states[0][2], other[2])


# ---- randomized ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_randomized_operation_sequences_keep_every_invariant(seed):
    rng = random.Random(seed)
    page = rng.choice([1, 1, 16])
    stack = build_stack(
        window=rng.choice([16, 32, 40]),
        page=page,
        chunk=rng.choice([64, 128, 160]) // page * page,
        full_pool=32768,
        swa_pool=rng.choice([1500, 4000, 16384]),
    )
    sched = MiniScheduler(stack, max_running=rng.choice([2, 4, 8]))
    bases = [random_prompt(rng, 400) for _ in range(3)]
    for step in range(500):
        op = rng.random()
        if op < 0.15 and len(sched.all_reqs) < 24:
            base = rng.choice(bases)
            cut = rng.randrange(0, len(base))
            sched.submit(f"q{step}", base[:cut] + random_prompt(rng, rng.randrange(1, 300)), rng.randrange(1, 120))
        elif op < 0.18 and sched.chunked_req is not None:
            sched.abort_chunked()
        elif op < 0.20:
            sched.retract_all_but_one()
        elif op < 0.22 and sched.idle():
            evict_all(stack)
        else:
            sched.step()
        check_invariants(stack, sched.running)
        if sched.idle():
            stack.tree.sanity_check()
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    assert_pools_back_to_baseline(stack)


@pytest.mark.parametrize("ordered", [False, True])
def test_without_stream_ordering_middle_commits_keep_the_inflight_chunk_window(ordered):
    """Backends without the WAR barrier (ROCm/NPU, overlap on): a middle-chunk commit must not free
    what the chunk still in flight reads, so its frontier is taken from the chunk's start. With
    stream ordering (CUDA barrier, CPU) the commit may free into that window: nothing reads it."""
    stack = build_stack(window=32, chunk=128)
    tree = stack.tree
    assert tree.stream_ordered  # CPU: the forward is done when run_batch returns
    tree.stream_ordered = ordered  # what commit_frees_are_stream_ordered says on ROCm/NPU
    rng = random.Random(10)
    sched = MiniScheduler(stack)
    req = sched.submit("a", random_prompt(rng, 700), 8)
    w = tree.window
    inflight_window_freed = []

    def on_event(label, reqs):
        if label == "chunk_commit":
            lo = max(req.extend_range.start - tree.sliding_window_size, 0)
            locs = stack.req_to_token_pool.req_to_token[req.req_pool_idx, lo : req.extend_range.end]
            live = stack.allocator.full_to_swa_index_mapping[locs.long()] > 0
            inflight_window_freed.append(not bool(live.all()))
            assert req_locked_swa(stack, req) <= (w + 1 if ordered else 128 + w + 1)
        check_invariants(stack, sched.running)

    sched.on_event = on_event
    sched.run()
    assert tree.stats.chunk_islands >= 4
    assert any(inflight_window_freed) == ordered, inflight_window_freed
    assert_pools_back_to_baseline(stack)


# ---- the claims a mutant of the island code would break -----------------------------------------


@pytest.mark.parametrize("page", [1, 16])
def test_island_commits_and_decode_islands_do_not_sync_the_host(page):
    """No op whose output size or value the host must wait for (on CUDA) runs inside a chunk
    commit or a decode island: the island SWA free gathers pages and appends them to the free
    list without ``unique`` or a ``> 0`` filter. Measured with the allocator's debug checks off
    (``SGLANG_DEBUG_MEMORY_POOL=1`` adds checks that do sync, by design)."""
    from islands_harness.host_syncs import SYNC_KEYS, make_sync_counter
    from islands_harness.stack import env_overrides

    with env_overrides({"SGLANG_DEBUG_MEMORY_POOL": "0"}):
        stack = build_stack(window=32, page=page, chunk=256, full_pool=32768, swa_pool=16384)
    tree = stack.tree
    Counter = make_sync_counter()
    counts = []

    def counted(fn):
        def wrapper(*a, **k):
            c = Counter()
            with c.active():
                out = fn(*a, **k)
            counts.append(c.counts)
            return out
        return wrapper

    tree.cache_unfinished_req = counted(tree.cache_unfinished_req)
    tree.insert_decode_island = counted(tree.insert_decode_island)
    rng = random.Random(13)
    run_workload(stack, [random_prompt(rng, n) for n in (900, 700, 530)], max_new=200)
    assert tree.stats.chunk_islands >= 8 and tree.stats.decode_islands >= 3
    assert len(counts) >= 11 and all(c.get("aten_ops", 0) > 0 for c in counts)
    syncs = [sum(c.get(k, 0) for k in SYNC_KEYS) for c in counts]
    assert max(syncs) == 0, [c for c in counts if sum(c.get(k, 0) for k in SYNC_KEYS)]
    assert_pools_back_to_baseline(stack)


def test_commit_frees_are_stream_ordered_only_where_the_forward_is_done(monkeypatch):
    """The ordering guard through its inputs: frees at a middle-chunk commit are stream-ordered on
    CPU, without overlap, and with a WAR barrier (CUDA, or SGLANG_ENABLE_WAR_BARRIER=1); not on a
    GPU backend with overlap and no barrier (this machine is not CUDA, so a "cuda" device with
    overlap stands for ROCm/NPU here)."""
    import torch

    from sglang.srt.mem_cache.swa_island_radix_cache import commit_frees_are_stream_ordered

    monkeypatch.delenv("SGLANG_ENABLE_WAR_BARRIER", raising=False)
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert commit_frees_are_stream_ordered(cpu, overlap=True)
    assert commit_frees_are_stream_ordered(cpu, overlap=False)
    assert commit_frees_are_stream_ordered(gpu, overlap=False)
    assert not commit_frees_are_stream_ordered(gpu, overlap=True)
    monkeypatch.setenv("SGLANG_ENABLE_WAR_BARRIER", "1")
    assert commit_frees_are_stream_ordered(gpu, overlap=True)


@pytest.mark.parametrize("page", [1, 16])
def test_allocator_with_sorted_release_gets_every_island_page_back(page):
    """PD modes build the paged allocators with ``need_sort=True`` (freed pages go to
    ``release_pages``); the island free must put its pages there too: after a workload that
    tombstones and evicts, both pools are back to their boot size."""
    stack = build_stack(window=32, page=page, chunk=128, full_pool=32768, swa_pool=4096,
                        need_sort=True)
    assert stack.allocator.swa_attn_allocator.need_sort
    rng = random.Random(14)
    shared = random_prompt(rng, 300)
    prompts = [shared + random_prompt(rng, n) for n in (400, 250, 600)]
    run_workload(stack, prompts, max_new=150)
    assert stack.tree.stats.freed_at_commit > 0
    assert_pools_back_to_baseline(stack)


def _tree_shape(tree):
    """(start, end, tombstone) of every node, in DFS order by position."""
    out, stack = [], [(tree.root_node, 0)]
    while stack:
        node, pos = stack.pop()
        for child in node.children.values():
            end = pos + len(child.value)
            out.append((pos, end, child.swa_tombstone))
            stack.append((child, end))
    return sorted(out)


def test_prefill_aware_swa_floor_keeps_upstream_behaviour():
    """A request with ``swa_evict_floor > 0`` (prefill-aware SWA models keep ``[0, floor)``
    visible) takes no island path: its commits and decode steps leave the tree exactly as
    upstream's do (same nodes, same tombstones, the last chunk node locked whole)."""
    seen = {}
    for islands in (False, True):
        stack = build_stack(window=32, chunk=128, islands=islands)
        rng = random.Random(15)
        sched = MiniScheduler(stack)
        req = sched.submit("a", random_prompt(rng, 600), 300)
        req.swa_evict_floor = 64
        locked = []

        def on_event(label, reqs, stack=stack, req=req, locked=locked):
            if label in ("chunk_commit", "last_chunk_commit"):
                locked.append(req_locked_swa(stack, req))

        sched.on_event = on_event
        sched.run(after_step=lambda: check_invariants(stack, sched.running))
        seen[islands] = (locked, _tree_shape(stack.tree))
        if islands:
            assert stack.tree.stats.chunk_islands == 0 and stack.tree.stats.decode_islands == 0
            assert stack.tree.stats.freed_at_commit == 0
        assert_pools_back_to_baseline(stack)
    assert seen[True] == seen[False]
    assert seen[True][0] == [128, 128, 128, 128, 88]  # upstream: the whole last chunk node
