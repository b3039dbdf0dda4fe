"""NEGATIVE CONTROL for decode islands under speculative decoding on sglang 0.5.23: the seed's
modulo trigger.

Test-only, like ``test/shims/wrong_frontier_main``: Python imports a module named
``sitecustomize`` at interpreter start only when its directory is on ``sys.path``, and only
``test/server/test_speculative_main.py`` puts this directory on the islands server's
``PYTHONPATH``; the scheduler subprocess inherits it.

What it breaks. ``SWAIslandUnifiedRadixCache.on_decode_progress`` lays a decode island when
``decode_island_due(L, last, interval)``: ``interval`` tokens committed since the last island
(accumulated progress). The shim replaces it, in the cache's module, with the natural trigger the
seed warns about: fire when ``L % interval == 0``. Under plain decoding ``L`` takes every value,
so islands fire as before; under speculative decoding ``L`` advances by whole accept lengths and
skips most multiples, so islands stop firing and a follow-up on the running request's output
misses far more than ``interval + draft tokens``. Log line: ``[modulo_cadence shim] installed``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

TARGET = "sglang.srt.mem_cache.swa_island_radix_cache"


def decode_island_due(committed_len: int, last_island_len: int, interval: int) -> bool:
    """The mutant: a multiple of the interval, past the last island."""
    return committed_len > last_island_len and committed_len % interval == 0


def install(module) -> None:
    module.decode_island_due = decode_island_due
    print(f"[modulo_cadence shim] pid={os.getpid()} installed on {TARGET}",
          file=sys.stderr, flush=True)


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


if TARGET in sys.modules:
    install(sys.modules[TARGET])
else:
    sys.meta_path.insert(0, _PatchAfterImport())
