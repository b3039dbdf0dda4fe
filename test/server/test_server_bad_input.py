"""Bad input from a client gets a clear 4xx and loses nothing: the islands server on the tiny
model answers every malformed `/generate` with 400 and a message naming the field and the limit,
while a bystander request started before it completes with the output it has alone, and the
server keeps serving afterwards (patch 0015 for token ids outside the vocabulary, which killed the
scheduler; the other cases are upstream's own checks, pinned here).

Real `sglang.launch_server` (CPU), islands on, page 1, chunk 128, context 4096, full pool 2048."""

from __future__ import annotations

import json

import pytest
import requests

from islands_harness.client import StreamingRequest
from islands_harness.server import SglangServer

pytestmark = pytest.mark.server

# a full pool (2048) smaller than the context (4096): some prompts fit the context, never the pool
ARGS = ["--page-size", "1", "--chunked-prefill-size", "128", "--max-total-tokens", "2048",
        "--enable-swa-islands", "--sleep-on-idle"]
BYSTANDER = list(range(10, 310))  # 300 tokens: several chunks
BYSTANDER_NEW = 48
TIMEOUT_S = 600


@pytest.fixture(scope="module")
def served():
    from islands_harness.tiny_model import build_tiny_model

    model = build_tiny_model(window=32)
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    with SglangServer(model, ARGS, boot_timeout_s=900) as srv:
        reference = srv.generate(BYSTANDER, BYSTANDER_NEW).output_ids
        srv.flush_cache()
        yield srv, vocab, reference


def post(srv, payload):
    return requests.post(f"{srv.base_url}/generate", json=payload, timeout=TIMEOUT_S)


def greedy(ids, new):
    return {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": new,
                                                  "ignore_eos": True}}


CASES = {
    # name: (payload from vocab, substring of the error message)
    "id_at_vocab_size": (lambda v: greedy([5, 6, v], 4),
                         lambda v: f"input_ids contains out-of-vocabulary token id {v}; "
                                   f"valid range is [0, {v})"),
    "id_far_above": (lambda v: greedy([5, 10**9, 7], 4),
                     lambda v: f"out-of-vocabulary token id {10**9}; valid range is [0, {v})"),
    "negative_id": (lambda v: greedy([5, -1, 7], 4),
                    lambda v: f"out-of-vocabulary token id -1; valid range is [0, {v})"),
    "empty_ids": (lambda v: greedy([], 4), lambda v: "input_ids cannot be empty"),
    "longer_than_context": (lambda v: greedy([5] * 5000, 4),
                            lambda v: "longer than the model's context length (4096 tokens)"),
    "never_fits_the_pool": (lambda v: greedy([5] * 3000, 4),
                            lambda v: "Input length (3000 tokens) exceeds the maximum allowed "
                                      "length (2042 tokens)"),
    "absurd_max_new_tokens": (lambda v: greedy([5, 6, 7], 10**9),
                              lambda v: "exceeds the model's maximum context length of 4096 "
                                        "tokens. You requested a total of 1000000003 tokens"),
    "negative_max_new_tokens": (lambda v: greedy([5, 6, 7], -5),
                                lambda v: "max_new_tokens must be at least 0, got -5"),
    "string_ids": (lambda v: greedy(["a", "b"], 4), lambda v: "input_ids"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_request_gets_400_and_the_bystander_is_untouched(served, case):
    """The bystander streams; the bad request goes in once it has produced a token, so it is in
    the running batch when the bad request arrives."""
    srv, vocab, reference = served
    payload, message = CASES[case][0](vocab), CASES[case][1](vocab)
    bystander = StreamingRequest(srv.base_url, BYSTANDER, BYSTANDER_NEW, name=case).start()
    bystander.wait_generated(1, timeout=TIMEOUT_S)
    r = post(srv, payload)
    assert r.status_code == 400, (r.status_code, r.text[:500])
    assert message in r.text, r.text[:500]
    assert bystander.wait(TIMEOUT_S).output_ids == reference
    assert srv.proc.poll() is None, "the server died"
    assert len(srv.generate([5, 6, 7, 8], 4).output_ids) == 4
