"""AUDIT for speculative decoding on sglang 0.5.23's CPU harness: does every attention read of a
sliding layer land on a live SWA slot?

Test-only, like ``test/shims/modulo_cadence_main``: imported at interpreter start only where
``test/server/test_speculative_main.py`` puts this directory on the server's ``PYTHONPATH``; the
scheduler subprocess inherits it. It changes no result.

What it counts. ``TorchNativeAttnBackend`` reads a sliding layer's K/V through the full -> SWA
slot mapping; a freed slot maps to 0, the pool's padding row. Around the backend's decode
(``_run_sdpa_forward_decode``: plain decode and the Frozen-KV MTP draft's steps; the positions
the window admits, the last ``sliding_window_size + 1`` of ``seq_lens``) and target verify
(``_run_sdpa_forward_target_verify``: the committed positions the root draft's window admits),
for every request of a sliding layer it maps those positions and counts the ones mapped to 0:
a read of freed (or never written) SWA KV. Per kind of read (``decode``: plain decoding's target
or a speculative drafter's steps; ``verify``: the target under speculative decoding), reads and
dead reads; a log line ``[swa_read_audit] KIND: N reads, D dead`` every 200 calls, and one at
the first dead read of a kind.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

TARGET = "sglang.srt.layers.attention.torch_native_backend"
STATS: dict = {}


def _say(msg: str) -> None:
    print(f"[swa_read_audit] pid={os.getpid()} {msg}", file=sys.stderr, flush=True)


def _audit(backend, req_to_token, req_pool_indices, seq_lens, window, kind: str) -> None:
    import torch

    pool = backend.token_to_kv_pool
    mapping = getattr(pool, "full_to_swa_index_mapping", None)
    if mapping is None or window is None or window < 0:
        return
    st = STATS.setdefault(kind, {"calls": 0, "reads": 0, "dead": 0, "first": None,
                                 "name": kind})
    st["calls"] += 1
    for i in range(len(seq_lens)):
        end = int(seq_lens[i])  # the last position the window admits, plus one
        start = max(0, end - (window + 1))
        ids = req_to_token[int(req_pool_indices[i]), start:end].to(torch.int64)
        dead = int((mapping[ids] == 0).sum())
        st["reads"] += ids.numel()
        if dead:
            st["dead"] += dead
            if st["first"] is None:
                st["first"] = f"positions [{start}, {end}) of row {int(req_pool_indices[i])}"
                _say(f"{st['name']}: first dead read, {dead} of {ids.numel()} at {st['first']}")
    if st["calls"] % 200 == 0:
        _say(f"{st['name']}: {st['reads']} reads, {st['dead']} dead")


def install(module) -> None:
    cls = module.TorchNativeAttnBackend
    real_decode = cls._run_sdpa_forward_decode
    real_verify = getattr(cls, "_run_sdpa_forward_target_verify", None)

    def decode(self, query, output, k_cache, v_cache, req_to_token, req_pool_indices, seq_lens,
               *args, **kwargs):
        if kwargs.get("is_swa_layer"):
            _audit(self, req_to_token, req_pool_indices, seq_lens,
                   kwargs.get("sliding_window_size"), "decode")
        return real_decode(self, query, output, k_cache, v_cache, req_to_token,
                           req_pool_indices, seq_lens, *args, **kwargs)

    cls._run_sdpa_forward_decode = decode
    if real_verify is not None:
        def verify(self, query, output, k_cache, v_cache, forward_batch, *args, **kwargs):
            if kwargs.get("is_swa_layer"):
                # the committed keys the root draft's window admits: [L - w_left, L)
                window = kwargs.get("sliding_window_size")
                _audit(self, self.req_to_token_pool.req_to_token, forward_batch.req_pool_indices,
                       forward_batch.seq_lens, None if window is None else window - 1, "verify")
            return real_verify(self, query, output, k_cache, v_cache, forward_batch, *args,
                               **kwargs)

        cls._run_sdpa_forward_target_verify = verify
    import atexit

    atexit.register(lambda: [_say(f"{s['name']}: {s['reads']} reads, {s['dead']} dead (at exit)")
                             for s in STATS.values()])
    _say("installed")


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        real_exec = spec.loader.exec_module

        def exec_module(module):
            real_exec(module)
            install(module)

        spec.loader.exec_module = exec_module
        return spec


if __name__ == "sitecustomize":  # the interpreter's start, not a test importing ``_audit``
    if TARGET in sys.modules:
        install(sys.modules[TARGET])
    else:
        sys.meta_path.insert(0, _PatchAfterImport())
