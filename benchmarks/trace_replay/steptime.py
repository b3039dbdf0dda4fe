"""The step-time model: how long, in model seconds, a scheduler iteration takes on the seed's
deployment (Gemma 4 26B-A4B text, fp8 KV, one H100/H200-class GPU, no speculative decoding, no
mixed chunks), so a replay can follow a trace's arrival times. Standard library only.

Decode step of ``B`` requests whose sequences are ``s_i`` tokens long (the token being decoded
included)::

    t_decode = DECODE_BASE_S + DECODE_PER_REQUEST_S * B
               + (FULL_BYTES * sum(s_i) + SWA_BYTES * sum(min(s_i, w))) / KV_BANDWIDTH

Prefill (extend) batch of requests ``i`` with ``n_i`` new tokens after a prefix of ``c_i``
cached or already computed tokens::

    t_prefill = PREFILL_BASE_S + PREFILL_PER_TOKEN_S * sum(n_i)
                + PREFILL_ATTENTION_S * sum(n_i * (c_i + n_i / 2))

Every time is divided by ``speed`` (``--speeds``: 2 is a device twice as fast, 0.5 half as fast),
so no conclusion rests on one set of constants. Why these constants:

- ``DECODE_BASE_S`` 6 ms: the weights every step reads whatever the batch (attention, the dense
  and shared-expert parts, embeddings: about 4 B active parameters, 8 GB in bf16, 2.7 ms at an
  effective 3 TB/s) plus launch and scheduler overhead under CUDA graphs (2-3 ms);
- ``DECODE_PER_REQUEST_S`` 0.25 ms: each request routes to 8 of the 128 experts per layer, so
  the expert weights a step reads grow with the batch until nearly all of them (about 45 GB,
  15 ms) are read near the cap of 48; 0.25 ms x 48 = 12 ms, plus sampling;
- ``KV_BANDWIDTH`` 2.5e12 B/s: an H100 SXM's 3.35 TB/s HBM at 75% for paged attention reads;
  ``FULL_BYTES`` / ``SWA_BYTES`` the seed's bytes per token (9,500 B over the 5 full layers,
  95,000 B over the 25 SWA layers, fp8; ``admission.setup.Production``), the SWA layers reading
  at most ``w`` tokens;
- ``PREFILL_PER_TOKEN_S`` 20 us: 7.6 GFLOP per token (2 x 3.8 B active parameters) at an
  effective 380 TFLOP/s (40% of an H100's dense bf16 peak, usual for MoE prefill), so a full
  16,384-token chunk takes 0.33 s;
- ``PREFILL_ATTENTION_S`` 0.2 ns per (new token x context token): the 5 full layers' attention,
  4 x 4,096 FLOP per pair per layer at the same 380 TFLOP/s (the SWA layers' window is a
  constant, folded into the per-token term);
- ``PREFILL_BASE_S`` 10 ms: a prefill batch's launch, scheduling and sampling.

At speed 1 the Mooncake conversation trace (3.3 requests/s, 12,035 input and 343 output tokens
each) keeps such a device busy most of the hour (its prefill alone, at its no-forget bound of
0.373 cached, is about 0.5 of the hour); at 0.5 it is overloaded and the queue grows, at 2 it is
lightly loaded.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence


@dataclasses.dataclass(frozen=True)
class StepTime:
    """The constants of the model (seconds, bytes, bytes per second); ``window``: the model's
    ``w`` (the SWA layers read at most ``w`` tokens per request)."""

    decode_base_s: float = 0.006
    decode_per_request_s: float = 0.00025
    kv_bandwidth: float = 2.5e12
    full_bytes: float = 9500.0
    swa_bytes: float = 95000.0
    prefill_base_s: float = 0.010
    prefill_per_token_s: float = 2.0e-5
    prefill_attention_s: float = 2.0e-10
    window: int = 1024
    speed: float = 1.0

    def decode(self, seq_lens: Sequence[int]) -> float:
        """A decode step of ``len(seq_lens)`` requests; ``seq_lens`` in tokens (each >= 1)."""
        full = sum(seq_lens)
        swa = sum(min(s, self.window) for s in seq_lens)
        t = (self.decode_base_s + self.decode_per_request_s * len(seq_lens)
             + (self.full_bytes * full + self.swa_bytes * swa) / self.kv_bandwidth)
        return t / self.speed

    def prefill(self, new_tokens: Sequence[int], context: Sequence[int]) -> float:
        """A prefill batch: per request ``new_tokens[i]`` computed after ``context[i]`` tokens
        it already has (cached or from earlier chunks)."""
        n = sum(new_tokens)
        pairs = sum(k * (c + k / 2) for k, c in zip(new_tokens, context))
        t = self.prefill_base_s + self.prefill_per_token_s * n + self.prefill_attention_s * pairs
        return t / self.speed

    def constants(self) -> dict:
        return dataclasses.asdict(self)
