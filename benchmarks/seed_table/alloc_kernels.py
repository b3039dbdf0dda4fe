"""The paged allocator's two Triton kernels of sglang 0.5.15.post1 (``triton_ops.allocator``:
``alloc_extend_kernel``, ``alloc_decode_kernel``), in torch, for CPU replays at page size > 1.

On CPU the kernels run under ``TRITON_INTERPRET=1``, which costs ~0.35 s per decode step at 22
running requests (the whole step's time, measured: 99% in the interpreter), so a replay of
96 requests x 16k output tokens would take days. These functions compute the same indices with
torch ops (``test_bench_seed_table`` checks them equal to the interpreted kernels on random
batches); :func:`native_alloc_kernels` puts them where ``allocator.paged`` launches the kernels,
for the duration of a ``with``. Everything around the launch (which pages are free, how many are
taken) stays the installed allocator's. sglang 0.5.23 needs none of this: its allocator runs its
own torch path (``alloc_*_naive``) where the platform has no Triton.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch


def alloc_extend(pre_lens, seq_lens, last_loc, free_pages, out, page: int) -> None:
    """``alloc_extend_kernel``: each request's new slots, in batch order, into ``out``: first the
    rest of its last partial page (``last_loc + 1, ...``), then whole new pages, then a new partial
    page; a request's new pages are taken from ``free_pages`` after those of the requests before it."""
    pre_lens, seq_lens, last_loc = pre_lens.long(), seq_lens.long(), last_loc.long()
    ext = seq_lens - pre_lens
    if int(ext.sum()) == 0:
        return
    new_pages = (seq_lens + page - 1) // page - (pre_lens + page - 1) // page
    page_start = torch.cumsum(new_pages, 0) - new_pages  # first free page of each request
    out_start = torch.cumsum(ext, 0) - ext
    owner = torch.repeat_interleave(torch.arange(len(ext)), ext)
    local = torch.arange(int(ext.sum())) - out_start[owner]
    part1 = torch.minimum(seq_lens, (pre_lens + page - 1) // page * page) - pre_lens
    p1 = part1[owner]
    in_part1 = local < p1
    rel = (local - p1).clamp(min=0)  # offset past the old partial page, page-aligned from here
    idx = (page_start[owner] + rel // page).clamp(max=max(len(free_pages) - 1, 0))
    pages = free_pages[idx] if len(free_pages) else torch.zeros_like(idx)
    out[: len(local)] = torch.where(in_part1, last_loc[owner] + 1 + local, pages * page + rel % page)


def alloc_decode(seq_lens, last_loc, free_pages, out, page: int) -> None:
    """``alloc_decode_kernel``: one slot per request: ``last_loc + 1``, or the first slot of the
    next free page (in batch order) where the new token starts a page."""
    seq_lens, last_loc = seq_lens.long(), last_loc.long()
    starts = ((seq_lens - 1) % page == 0).long()
    rank = (torch.cumsum(starts, 0) - starts).clamp(max=max(len(free_pages) - 1, 0))
    pages = free_pages[rank] if len(free_pages) else torch.zeros_like(rank)
    out[: len(seq_lens)] = torch.where(starts.bool(), pages * page, last_loc + 1)


class _Launch:
    """``kernel[grid](*args)`` for a torch function: the grid is the batch, implied by the args."""

    def __init__(self, fn, n_tensors: int):
        self.fn, self.n = fn, n_tensors

    def __getitem__(self, grid):
        return lambda *args: self.fn(*args[: self.n], args[-1])


@contextlib.contextmanager
def native_alloc_kernels() -> Iterator[None]:
    """Inside: ``sglang.srt.mem_cache.allocator.paged`` launches :func:`alloc_extend` and
    :func:`alloc_decode` instead of the Triton kernels (sglang 0.5.15.post1)."""
    from sglang.srt.mem_cache.allocator import paged

    saved = paged.alloc_extend_kernel, paged.alloc_decode_kernel
    paged.alloc_extend_kernel = _Launch(alloc_extend, 5)
    paged.alloc_decode_kernel = _Launch(alloc_decode, 4)
    try:
        yield
    finally:
        paged.alloc_extend_kernel, paged.alloc_decode_kernel = saved
