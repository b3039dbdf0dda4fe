"""The harness-only ``sgl_kernel`` CPU stand-in of ``.venv-main`` (stock sglang 0.5.23; issue 17).

``islands_harness/main_compat/site/sgl_kernel`` replaces the CPU kernels that sglang 0.5.23
imports at module load on CPU (the registry's sglang-kernel wheel is CUDA-only). Checked here:
- each pure-torch function against its documented semantics (in this process), and against the
  upstream Triton kernel it stands for, run by Triton's interpreter inside ``.venv-main``;
- the speculative-decoding kernels: test_main_compat_speculative.py;
- the stand-in is on ``.venv-main``'s path and not on ``.venv``'s;
- the harness-only series patches-main/series-stock applies to the pristine 0.5.23 wheel and is
  what is installed in ``.venv-main`` (scripts/patches_main.py; the islands series and its
  environment are test_patches_main.py's);
- (``server``) the tiny model boots on ``.venv-main`` and its temperature-0 outputs on the e2e
  workload (test_server_e2e's 34 requests, ``islands_harness.e2e_workload``) equal transformers'
  greedy decoding (``scripts/main_smoke.py --e2e``).

Everything skips when ``.venv-main`` does not exist (scripts/setup_main.sh builds it; .ci/run
runs it after scripts/setup.sh).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
MAIN_PY = REPO / ".venv-main" / "bin" / "python"
STANDIN = REPO / "islands_harness" / "main_compat" / "site" / "sgl_kernel" / "__init__.py"

if not MAIN_PY.exists():
    pytest.skip(".venv-main does not exist (build it with scripts/setup_main.sh)",
                allow_module_level=True)

import torch  # noqa: E402


def _load_standin():
    """The stand-in package under another name (its ``speculative`` submodule with it)."""
    name = "islands_main_compat_sgl_kernel"
    spec = importlib.util.spec_from_file_location(
        name, STANDIN, submodule_search_locations=[str(STANDIN.parent)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


sk = _load_standin()


def _main_env():
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", OMP_NUM_THREADS="2")
    env.pop("PYTHONPATH", None)
    return env


# ---- copy_all_layer_kv_cache_cpu ------------------------------------------------------------

def _ptrs_strides(bufs):
    ptrs = torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64)
    strides = torch.tensor([b.stride(0) * b.element_size() for b in bufs])
    return ptrs, strides


def _expected_copy(bufs, tgt, src):
    out = [b.clone() for b in bufs]
    for o in out:
        o[tgt] = o[src].clone()
    return out


def test_copy_moves_rows_in_every_buffer():
    g = torch.Generator().manual_seed(0)
    bufs = [torch.randn(12, 2, 8, generator=g), torch.randn(12, 5, generator=g).double(),
            torch.randint(-100, 100, (12, 3), generator=g, dtype=torch.int8)]
    tgt = torch.tensor([3, 7, 11])
    src = torch.tensor([0, 2, 4])
    exp = _expected_copy(bufs, tgt, src)
    sk.copy_all_layer_kv_cache_cpu(*_ptrs_strides(bufs), tgt, src)
    for b, e in zip(bufs, exp):
        assert torch.equal(b, e)


def test_copy_is_safe_for_overlapping_moves():
    """Sources are read before targets are written: a swap and a shift stay correct."""
    buf = torch.arange(24, dtype=torch.float32).view(6, 4).clone()
    orig = buf.clone()
    sk.copy_all_layer_kv_cache_cpu(*_ptrs_strides([buf]), torch.tensor([0, 1]), torch.tensor([1, 0]))
    assert torch.equal(buf[0], orig[1]) and torch.equal(buf[1], orig[0])
    buf = orig.clone()
    sk.copy_all_layer_kv_cache_cpu(*_ptrs_strides([buf]), torch.tensor([1, 2, 3]),
                                   torch.tensor([0, 1, 2]))
    assert torch.equal(buf[1:4], orig[0:3]) and torch.equal(buf[0], orig[0])


def test_copy_touches_only_target_rows_and_accepts_empty_and_int32():
    buf = torch.arange(40, dtype=torch.float32).view(10, 4).clone()
    orig = buf.clone()
    sk.copy_all_layer_kv_cache_cpu(*_ptrs_strides([buf]), torch.tensor([], dtype=torch.int64),
                                   torch.tensor([], dtype=torch.int64))
    assert torch.equal(buf, orig)
    sk.copy_all_layer_kv_cache_cpu(*_ptrs_strides([buf]), torch.tensor([9], dtype=torch.int32),
                                   torch.tensor([2], dtype=torch.int32))
    assert torch.equal(buf[9], orig[2]) and torch.equal(buf[:9], orig[:9])


def test_copy_rejects_mismatched_lengths():
    buf = torch.zeros(4, 4)
    with pytest.raises(ValueError):
        sk.copy_all_layer_kv_cache_cpu(*_ptrs_strides([buf]), torch.tensor([0, 1]), torch.tensor([2]))


# ---- assign_req_to_token_pool_cpu -----------------------------------------------------------

def _expected_assign(req_to_token, rows, starts, ends, out_cache_loc):
    out = req_to_token.clone()
    pt = 0
    for r, s, e in zip(rows, starts, ends):
        out[r, s:e] = out_cache_loc[pt:pt + e - s].to(out.dtype)
        pt += e - s
    return out


def test_assign_writes_each_request_span_in_batch_order():
    req_to_token = torch.full((5, 16), -1, dtype=torch.int32)
    rows, starts, ends = [3, 0, 4], [2, 0, 15], [7, 0, 16]  # the middle request extends by 0
    loc = torch.arange(100, 106, dtype=torch.int64)
    exp = _expected_assign(req_to_token, rows, starts, ends, loc)
    sk.assign_req_to_token_pool_cpu(torch.tensor(rows), req_to_token, torch.tensor(starts),
                                    torch.tensor(ends), loc, req_to_token.shape[1])
    assert torch.equal(req_to_token, exp)
    assert req_to_token[3, 2:7].tolist() == [100, 101, 102, 103, 104]
    assert req_to_token[4, 15].item() == 105
    assert (req_to_token[[1, 2]] == -1).all()


def test_assign_checks_pool_len():
    with pytest.raises(ValueError):
        sk.assign_req_to_token_pool_cpu(torch.tensor([0]), torch.zeros(1, 8, dtype=torch.int32),
                                        torch.tensor([0]), torch.tensor([1]),
                                        torch.tensor([1]), 9)


# ---- import surface, where it is installed ------------------------------------------------

def test_standin_provides_only_its_names():
    assert not hasattr(sk, "rmsnorm") and not hasattr(sk, "silu_and_mul")
    assert sk.IS_ISLANDS_HARNESS_STANDIN


def test_standin_is_on_main_venv_path_only():
    pths = list((REPO / ".venv").glob("lib/python*/site-packages/islands_main_compat.pth"))
    assert pths == [], "the sgl_kernel stand-in must never be on the pinned .venv's path"
    out = subprocess.run([str(MAIN_PY), "-c", "import sgl_kernel; print(sgl_kernel.__file__)"],
                         capture_output=True, text=True, timeout=120, env=_main_env())
    assert out.returncode == 0, out.stderr[-2000:]
    assert pathlib.Path(out.stdout.strip()).resolve() == STANDIN.resolve()


# ---- against the upstream Triton kernels, in .venv-main (Triton interpreter) ----------------

REFERENCE_SCRIPT = textwrap.dedent(r"""
    import json, random, torch
    import sgl_kernel as sk
    from sglang.kernels.ops.kvcache.cache_move import copy_all_layer_kv_cache_tiled
    from sglang.srt.mem_cache.allocation import assign_req_to_token_pool
    rng = random.Random(0)
    g = torch.Generator().manual_seed(0)
    results = []
    for case in range(6):
        rows = rng.randrange(4, 40)
        bufs = [torch.randn(rows, rng.randrange(1, 9), generator=g),
                torch.randint(-9, 9, (rows, rng.randrange(1, 7)), generator=g, dtype=torch.int8)]
        n = rng.randrange(1, rows)
        src = torch.tensor(rng.sample(range(rows), n)); tgt = torch.tensor(rng.sample(range(rows), n))
        a = [b.clone() for b in bufs]; b_ = [b.clone() for b in bufs]
        ptrs = lambda bs: torch.tensor([x.data_ptr() for x in bs], dtype=torch.uint64)
        strides = torch.tensor([x.stride(0) * x.element_size() for x in bufs])
        sk.copy_all_layer_kv_cache_cpu(ptrs(a), strides, tgt, src)
        upper = 1 << (n - 1).bit_length()
        src_p = torch.cat([src, torch.zeros(upper - n, dtype=torch.int64)])
        tgt_p = torch.cat([tgt, torch.zeros(upper - n, dtype=torch.int64)])
        tile = 16
        copy_all_layer_kv_cache_tiled[(len(bufs), (int(strides.max()) + tile - 1) // tile)](
            ptrs(b_), strides, tgt_p, src_p, n, upper, BYTES_PER_TILE=tile)
        results.append(("copy", case, all(torch.equal(x, y) for x, y in zip(a, b_))))
    for case in range(6):
        bs, pool_len = rng.randrange(1, 6), rng.randrange(8, 64)
        req = torch.full((bs + 3, pool_len), -1, dtype=torch.int32)
        rows_ = torch.tensor(rng.sample(range(bs + 3), bs))
        starts = [rng.randrange(0, pool_len) for _ in range(bs)]
        ends = [rng.randrange(s, pool_len + 1) for s in starts]
        total = sum(e - s for s, e in zip(starts, ends))
        loc = torch.randint(0, 10000, (total,), generator=g, dtype=torch.int64)
        a, b_ = req.clone(), req.clone()
        sk.assign_req_to_token_pool_cpu(rows_, a, torch.tensor(starts), torch.tensor(ends), loc, pool_len)
        assign_req_to_token_pool[(bs,)](rows_, b_, torch.tensor(starts), torch.tensor(ends), loc,
                                        pool_len, 1 << max(bs - 1, 0).bit_length())
        results.append(("assign", case, torch.equal(a, b_)))
    print(json.dumps(results))
""")


def run_reference(script: str, timeout: int = 600) -> list:
    """``script``'s JSON results, run in ``.venv-main`` with sglang's Triton kernels imported
    without their CPU branch and executed by Triton's interpreter."""
    env = _main_env()
    env["SGLANG_USE_CPU_ENGINE"] = "0"  # import the Triton modules without the CPU branch
    env["TRITON_INTERPRET"] = "1"
    out = subprocess.run([str(MAIN_PY), "-c", script], capture_output=True, text=True,
                         timeout=timeout, env=env, cwd=str(REPO))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_standin_equals_upstream_triton_kernels_under_interpreter():
    results = run_reference(REFERENCE_SCRIPT)
    assert len(results) == 12
    assert all(ok for _, _, ok in results), results


# ---- the harness-only patch series (patches-main/) -----------------------------------------

def test_patches_main_applies_and_is_installed():
    out = subprocess.run([str(MAIN_PY), str(REPO / "scripts" / "patches_main.py"), "check"],
                         capture_output=True, text=True, timeout=300, env=_main_env(), cwd=str(REPO))
    assert out.returncode == 0, out.stdout + out.stderr
    series = [ln.split("#", 1)[0].strip()
              for ln in (REPO / "patches-main" / "series-stock").read_text().splitlines()]
    series = [n for n in series if n]
    pkg = next((REPO / ".venv-main").glob("lib/python*/site-packages/sglang"))
    manifest = json.loads((pkg / ".islands_harness_main_patches.json").read_text())
    assert manifest["harness_only"] and manifest["patches"] == series, (
        "the installed series is not this checkout's: run scripts/setup_main.sh")
    for rel, sha in manifest["files_sha256"].items():
        assert hashlib.sha256((pkg / rel).read_bytes()).hexdigest() == sha, rel


# ---- the server ----------------------------------------------------------------------------

@pytest.mark.server
def test_tiny_model_on_main_equals_transformers_on_e2e_workload():
    """Stock 0.5.23 (+ patches-main) on CPU serves test_server_e2e's workload token for token like
    transformers. Without patches-main/0001 the server dies at the 7th request (IndexError in
    torch_native's SWA read)."""
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "main_smoke.py"), "--e2e"],
                         capture_output=True, text=True, timeout=900, cwd=str(REPO))
    report = json.loads(out.stdout) if out.stdout.strip().startswith("{") else {}
    assert report.get("booted"), (report.get("error") or out.stderr)[-4000:]
    bad = [r for r in report["requests"] if not r.get("match")]
    assert not bad, (bad, report.get("log_tail"))
    assert len(report["requests"]) == report["requests_planned"] == 34
    assert out.returncode == 0
