"""One boot of the 0.5.23 islands environment (`.venv-main-islands`, `--enable-swa-islands`) on the
tiny hybrid-SWA model: a follow-up sent while its predecessor is still generating hits the
predecessor's output (decode islands), and both outputs equal transformers' greedy ones.

    /work/main/.venv/bin/python scripts/main_decode_islands_check.py \\
        [--python .venv-main-islands/bin/python] [--boot-timeout 300]

Runs under the pinned `.venv` (harness, tiny model, HF oracle); only the server runs on
`--python`. Server: the harness's `BASE_ARGS`, page 1, chunked prefill 128 (decode-island interval
128/4 = 32), a 4096-token full pool, SWA ratio 0.25, `--enable-swa-islands`. Workload
(`islands_harness.conversations.follow_up_while_running`): A (a 300-token prompt, 600 new
tokens) streams; once it has streamed k*32 + 5 tokens (k = 3), B = A's prompt + those tokens + 20
new ones is sent while A runs. Prints one JSON report; exit 0 only when B hits at least
len(prompt) + k*32 tokens (stock main: the prompt only, generated text enters its tree at finish),
A was still running when B returned, and A's and B's outputs equal the oracle's.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from islands_harness.conversations import follow_up_while_running  # noqa: E402
from islands_harness.server import SglangServer  # noqa: E402

WINDOW, CHUNK = 32, 128
INTERVAL = CHUNK // 4
K, DELTA = 3, 5
PROMPT_LEN, A_NEW, B_USER, B_NEW = 300, 600, 20, 8
SERVER_ARGS = ["--page-size", "1", "--chunked-prefill-size", str(CHUNK),
               "--max-total-tokens", "4096", "--swa-full-tokens-ratio", "0.25",
               "--enable-metrics", "--enable-swa-islands"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=str(REPO / ".venv-main-islands" / "bin" / "python"))
    ap.add_argument("--boot-timeout", type=float, default=300.0)
    a = ap.parse_args(argv)

    from islands_harness.hf_oracle import greedy_decode_one
    from islands_harness.tiny_model import build_tiny_model

    path = build_tiny_model(window=WINDOW)
    vocab_hi = json.loads((path / ".tiny_model_complete.json").read_text())["real_vocab"]
    rng = random.Random(2027)
    prompt = [rng.randrange(4, vocab_hi) for _ in range(PROMPT_LEN)]
    b_user = [rng.randrange(4, vocab_hi) for _ in range(B_USER)]
    t0 = time.monotonic()
    ref_a = greedy_decode_one(path, prompt, A_NEW)
    want = K * INTERVAL + DELTA
    ref_b = greedy_decode_one(path, prompt + ref_a[:want] + b_user, B_NEW)
    report: dict = {"python": a.python, "server_args": SERVER_ARGS,
                    "oracle_s": round(time.monotonic() - t0, 1)}

    srv = SglangServer(path, SERVER_ARGS, python=a.python, boot_timeout_s=a.boot_timeout)
    srv.start()
    report.update(boot_s=round(srv.boot_s, 1), log=str(srv.log_path))
    try:
        fu = follow_up_while_running(srv, prompt, k=K, delta=DELTA, interval=INTERVAL,
                                     a_max_new=A_NEW, b_new=b_user, b_max_new=B_NEW,
                                     log=lambda m: print(m, file=sys.stderr))
    finally:
        srv.stop()
    report.update(
        prompt_len=fu.prompt_len, generated_at_send=fu.generated_at_send,
        b_prompt_len=fu.b_prompt_len, b_cached_tokens=fu.b_cached_tokens,
        expected_min_hit=fu.expected_min_hit, a_running_when_b_done=fu.a_running_when_b_done,
        a_equals_oracle=fu.a_output_ids == ref_a, b_equals_oracle=fu.b_output_ids == ref_b,
        seconds=round(fu.seconds, 1),
    )
    ok = (fu.b_cached_tokens >= fu.expected_min_hit and fu.a_running_when_b_done
          and report["a_equals_oracle"] and report["b_equals_oracle"])
    report["ok"] = ok
    print(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
