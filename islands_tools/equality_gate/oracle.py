"""Equality gate, oracle: transformers' fp32 greedy decoding (islands_harness.hf_oracle) as the
independent witness every output is compared with, cached on disk by content hash.

The cache file holds ``{"fingerprint", "entries"}``; entries are keyed by sha256 of
``[prompt ids, n]`` and are kept only while the fingerprint (model files, transformers and torch
versions, device) is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import time
from typing import Optional

from .setup import model_hash


class Oracle:
    """transformers fp32 greedy (islands_harness.hf_oracle), cached on disk by content hash."""

    def __init__(self, model_dir: pathlib.Path, cache_path: Optional[pathlib.Path], threads: int,
                 device: str = "cpu", python: Optional[str] = None):
        self.model_dir = model_dir
        self.cache_path = cache_path
        self.threads = threads
        self.device = device
        self.worker = None
        if python:  # another interpreter's transformers decodes (hf_oracle.OracleWorker)
            from islands_harness.hf_oracle import OracleWorker

            self.worker = OracleWorker(python, model_dir, threads=threads)
        self.calls = 0
        self.hits = 0
        self.seconds = 0.0
        self.fingerprint = self._fingerprint()
        self._cache: dict[str, list[int]] = {}
        if cache_path and cache_path.exists():
            try:
                data = json.loads(cache_path.read_text())
                if data.get("fingerprint") == self.fingerprint:
                    self._cache = data.get("entries", {})
            except (OSError, ValueError):
                self._cache = {}

    def _fingerprint(self) -> str:
        if self.worker is not None:
            versions = self.worker.versions
        else:
            import torch
            import transformers

            versions = {"transformers": transformers.__version__, "torch": torch.__version__}
        h = hashlib.sha256(model_hash(self.model_dir).encode())
        h.update(f"transformers={versions['transformers']} torch={versions['torch']} "
                 f"device={self.device}".encode())
        return h.hexdigest()

    def __call__(self, ids: list[int], n: int) -> list[int]:
        key = hashlib.sha256(json.dumps([list(ids), n]).encode()).hexdigest()
        if key in self._cache:
            self.hits += 1
            return list(self._cache[key])
        import torch

        from islands_harness.hf_oracle import greedy_decode_one

        torch.set_num_threads(self.threads)
        t = time.monotonic()
        if self.worker is not None:
            out = self.worker(ids, n)
        elif self.device == "cpu":
            out = greedy_decode_one(self.model_dir, ids, n)
        else:
            out = self._greedy_on_device(ids, n)
        self.seconds += time.monotonic() - t
        self.calls += 1
        self._cache[key] = list(out)
        self._save()
        return list(out)

    def margin(self, ids: list[int]) -> dict:
        """HF's next-token margin after ``ids`` (hf_oracle.next_token_margin), not cached."""
        if self.worker is not None:
            return self.worker.margin(ids)
        from islands_harness.hf_oracle import next_token_margin

        return next_token_margin(self.model_dir, ids)

    def _greedy_on_device(self, ids: list[int], n: int) -> list[int]:
        """hf_oracle.greedy_decode_one's computation (fp32, KV cache, EOS off) on another device
        (the GPU gate: long prompts, fast enough there)."""
        import torch

        from islands_harness.hf_oracle import load_model

        model = load_model(str(self.model_dir.resolve()), "float32").to(self.device)
        x = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        with torch.no_grad():
            out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n,
                                 min_new_tokens=n, do_sample=False, use_cache=True,
                                 eos_token_id=None, pad_token_id=model.config.pad_token_id or 0)
        return out[0, x.shape[1]:].tolist()

    def _save(self) -> None:
        if not self.cache_path:
            return
        self.cache_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.cache_path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"fingerprint": self.fingerprint, "entries": self._cache}))
        os.replace(tmp, self.cache_path)
