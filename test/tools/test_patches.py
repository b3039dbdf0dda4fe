"""scripts/patches.py: the patch series and the tool that maintains and applies it.

Needs the pristine wheel in .cache/wheels/ (scripts/setup.sh puts it there; otherwise the first
call downloads it) and, for the last tests, the patched engine in .venv (scripts/setup.sh)."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "scripts" / "patches.py"
PATCHES = REPO / "patches"
TNB = "srt/layers/attention/torch_native_backend.py"
FIX_0001 = "0001-torch-native-translate-swa-kv-reads.patch"

import islands_tools.patches.cli as tool  # noqa: E402  (what scripts/patches.py runs)


def run(*args, check=None):
    r = subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True)
    if check is not None:
        assert (r.returncode == 0) == check, f"rc={r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def git(cwd, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="Test", GIT_AUTHOR_EMAIL="test@example.invalid",
        GIT_COMMITTER_NAME="Test", GIT_COMMITTER_EMAIL="test@example.invalid",
        GIT_EDITOR="true", GIT_SEQUENCE_EDITOR="true",
    )
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True)


SERIES = [p.name for p in tool.read_series(PATCHES)]
TOUCHED = sorted({r for p in tool.read_series(PATCHES) for r in tool.patch_files(p)})


@pytest.fixture(scope="session")
def upstream():
    return tool.Upstream(tool.fetch_wheel(tool.DEFAULT_CACHE))


def tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def copy_patches(dst: Path) -> Path:
    shutil.copytree(PATCHES, dst, ignore=shutil.ignore_patterns("*.rej", "*.orig"))
    return dst


def corrupt(patch: Path) -> None:
    """Change a context line of every hunk that has it, so that the hunks no longer match."""
    text = patch.read_text()
    bad = text.replace(
        "\n             req_pool_idx = req_pool_indices[seq_idx]\n",
        "\n             req_pool_idx = req_pool_indices[seq_idx + 1]\n",
    )
    assert bad != text
    patch.write_text(bad)


def minimal_site(tmp_path: Path, upstream) -> Path:
    """A site-packages dir holding a pristine sglang reduced to what `apply` looks at."""
    site = tmp_path / "site"
    for rel in {"__init__.py", "_version.py", "version.py", "srt/mem_cache/common.py", *TOUCHED}:
        if not upstream.has(rel):
            continue
        dst = site / "sglang" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(upstream.read(rel))
    return site


def make_overlay(tmp_path: Path) -> Path:
    ov = tmp_path / "overlay"
    (ov / "srt" / "mem_cache").mkdir(parents=True)
    (ov / "srt" / "mem_cache" / "island_probe.py").write_text("ISLAND = 1\n")
    (ov / "island_pkg").mkdir()
    (ov / "island_pkg" / "__init__.py").write_text("")
    (ov / "island_pkg" / "__pycache__").mkdir()
    (ov / "island_pkg" / "__pycache__" / "junk.cpython-311.pyc").write_bytes(b"junk")
    return ov


# ---------------------------------------------------------------------------------------------


def test_help_lists_every_subcommand():
    out = run("--help", check=True).stdout
    for sub in ("fetch", "check", "apply", "worktree", "refresh", "--patches-dir"):
        assert sub in out
    for sub in ("check", "apply", "worktree", "refresh"):
        run(sub, "--help", check=True)


def test_series_starts_with_the_translate_fix():
    assert SERIES[0] == FIX_0001
    assert all(name.startswith(f"{i:04d}-") for i, name in enumerate(SERIES, 1))


def test_check_passes_on_real_series():
    r = run("check", check=True)
    assert f"ok  {FIX_0001}" in r.stdout
    assert "apply cleanly" in r.stdout


def test_check_fails_on_corrupted_patch(tmp_path):
    pdir = copy_patches(tmp_path / "patches")
    corrupt(pdir / FIX_0001)
    r = run("--patches-dir", pdir, "check", check=False)
    assert r.returncode == 1
    assert f"patch {FIX_0001} does not apply" in r.stderr
    assert "rejected hunks" in r.stderr and "@@ " in r.stderr  # the .rej content is shown
    assert "seq_idx + 1" in r.stderr


def test_check_rejects_patch_outside_upstream_layout(tmp_path):
    pdir = tmp_path / "patches"
    pdir.mkdir()
    (pdir / "0001-x.patch").write_text(
        "diff --git a/scripts/x.py b/scripts/x.py\n--- a/scripts/x.py\n+++ b/scripts/x.py\n"
    )
    (pdir / "series").write_text("# comment\n0001-x.patch\n")
    r = run("--patches-dir", pdir, "check", check=False)
    assert r.returncode == 1 and "only touch upstream files" in r.stderr


def test_apply_is_idempotent_and_overlays_our_modules(tmp_path, upstream):
    site = minimal_site(tmp_path, upstream)
    ov = make_overlay(tmp_path)
    args = ("--overlay-dir", ov, "apply", "--site-packages", site)
    first = run(*args, check=True)
    assert f"{len(SERIES)} patch(es)" in first.stdout and "2 overlay file(s)" in first.stdout
    h1 = tree_hash(site)
    second = run(*args, check=True)
    assert "0 file(s) changed" in second.stdout
    assert tree_hash(site) == h1

    pkg = site / "sglang"
    patched = (pkg / TNB).read_text()
    assert patched != upstream.read(TNB).decode()
    assert "translate_loc_from_full_to_swa(\n                    per_req_tokens" in patched
    assert (pkg / "srt/mem_cache/island_probe.py").read_text() == "ISLAND = 1\n"
    assert (pkg / "island_pkg/__init__.py").is_file()
    assert not (pkg / "island_pkg/__pycache__").exists()
    assert (pkg / "srt/mem_cache/common.py").read_bytes() == upstream.read("srt/mem_cache/common.py")
    manifest = json.loads((pkg / tool.MANIFEST_NAME).read_text())
    assert manifest["patches"] == SERIES
    assert manifest["patched_files"] == TOUCHED
    assert manifest["overlay_files"] == ["island_pkg/__init__.py", "srt/mem_cache/island_probe.py"]
    assert manifest["series_sha256"] == tool.series_sha256(tool.read_series(PATCHES))

    # A module dropped from the overlay disappears from the package on the next apply.
    shutil.rmtree(ov / "island_pkg")
    run(*args, check=True)
    assert not (pkg / "island_pkg").exists()
    assert (pkg / "srt/mem_cache/island_probe.py").is_file()


def test_apply_failure_leaves_touched_files_pristine(tmp_path, upstream):
    site = minimal_site(tmp_path, upstream)
    ov = make_overlay(tmp_path)
    run("--overlay-dir", ov, "apply", "--site-packages", site, check=True)
    pdir = copy_patches(tmp_path / "patches")
    corrupt(pdir / FIX_0001)
    r = run("--patches-dir", pdir, "--overlay-dir", ov, "apply", "--site-packages", site, check=False)
    assert r.returncode == 1
    assert f"patch {FIX_0001} does not apply" in r.stderr and "@@ " in r.stderr
    pkg = site / "sglang"
    assert (pkg / TNB).read_bytes() == upstream.read(TNB)
    assert not (pkg / "srt/mem_cache/island_probe.py").exists()
    assert not (pkg / tool.MANIFEST_NAME).exists()


def test_apply_refuses_other_packages(tmp_path, upstream):
    site = minimal_site(tmp_path, upstream)
    (site / "sglang" / "_version.py").write_text("__version__ = '0.0.1'\n")
    r = run("apply", "--site-packages", site, check=False)
    assert r.returncode == 1 and "is not an installed sglang" in r.stderr


def test_worktree_then_refresh_without_edits_is_byte_identical(tmp_path):
    wt = tmp_path / "wt"
    run("worktree", wt, check=True)
    log = git(wt, "log", "--reverse", "--format=%s").stdout.splitlines()
    assert len(log) == 1 + len(SERIES)
    assert log[0] == "upstream 0.5.15.post1"
    assert log[1] == "torch_native: translate SWA KV reads"
    pdir = copy_patches(tmp_path / "patches")
    run("--patches-dir", pdir, "refresh", wt, check=True)
    assert sorted(p.name for p in pdir.iterdir()) == sorted(p.name for p in PATCHES.iterdir())
    for p in PATCHES.iterdir():
        assert (pdir / p.name).read_bytes() == p.read_bytes(), p.name


def test_edit_amend_refresh_updates_the_patch(tmp_path):
    """The developer loop: amend the top patch, fix up an earlier one, add a new one, refresh."""
    wt = tmp_path / "wt"
    run("worktree", wt, "--with", "python/sglang/srt/mem_cache/common.py", check=True)
    base = tool.BASE_TAG
    # 1. Amend the top commit (the last patch of the series).
    top_file = wt / git(wt, "diff-tree", "--no-commit-id", "--name-only", "-r", "HEAD").stdout.split()[0]
    top_file.write_text(top_file.read_text() + "# amended in a test\n")
    git(wt, "commit", "-q", "-a", "--amend", "--no-edit")
    # 2. Fix up patch 0001 wherever it sits in the series.
    first = git(wt, "rev-list", "--reverse", f"{base}..HEAD").stdout.split()[0]
    src = wt / "python/sglang" / TNB
    old = "# req_to_token holds full-pool slot ids; translate them like the writes."
    new = "# req_to_token holds full-pool slot ids (fixed up in a test)."
    assert src.read_text().count(old) == 2
    src.write_text(src.read_text().replace(old, new))
    git(wt, "commit", "-q", "-a", f"--fixup={first}")
    git(wt, "rebase", "-q", "-i", "--autosquash", base)
    # 3. A new patch, as a new commit on another file.
    common = wt / "python/sglang/srt/mem_cache/common.py"
    common.write_text(common.read_text() + "\n# second patch\n")
    git(wt, "commit", "-q", "-a", "-m", "mem_cache: Extra_patch for the test")

    pdir = copy_patches(tmp_path / "patches")
    r = run("--patches-dir", pdir, "refresh", wt, check=True)
    assert "apply cleanly" in r.stdout
    extra = f"{len(SERIES) + 1:04d}-mem-cache-extra-patch-for-the-test.patch"
    assert [p.name for p in tool.read_series(pdir)] == SERIES + [extra]
    fix = (pdir / FIX_0001).read_text()
    assert fix.count("+                " + new) == 2 and old not in fix
    assert "Subject: [PATCH] torch_native: translate SWA KV reads\n" in fix
    assert "+# amended in a test" in (pdir / SERIES[-1]).read_text()
    for name in SERIES[1:-1]:  # untouched patches stay byte-identical
        assert (pdir / name).read_bytes() == (PATCHES / name).read_bytes(), name
    assert "+# second patch" in (pdir / extra).read_text()
    # The refreshed series round-trips through a fresh worktree.
    run("--patches-dir", pdir, "worktree", tmp_path / "wt2", check=True)
    tree = lambda d: git(d, "rev-parse", "HEAD^{tree}").stdout
    assert tree(tmp_path / "wt2") == tree(wt)


def test_refresh_refuses_uncommitted_edits(tmp_path):
    wt = tmp_path / "wt"
    run("worktree", wt, check=True)
    (wt / "python/sglang" / TNB).write_text("oops\n")
    pdir = copy_patches(tmp_path / "patches")
    r = run("--patches-dir", pdir, "refresh", wt, check=False)
    assert r.returncode == 1 and "uncommitted changes" in r.stderr
    assert (pdir / FIX_0001).read_bytes() == (PATCHES / FIX_0001).read_bytes()


# --- patch 0001 itself: SWA layers of the torch_native backend read translated slots ----------

_SWA_READ_PROBE = textwrap.dedent(
    """
    import importlib.util, sys
    from types import SimpleNamespace as NS
    import torch
    from sglang.srt.layers.radix_attention import AttentionType
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool

    if len(sys.argv) > 1:  # a given torch_native_backend.py (the pristine one)
        spec = importlib.util.spec_from_file_location("tnb_under_test", sys.argv[1])
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    else:
        import sglang.srt.layers.attention.torch_native_backend as mod

    torch.manual_seed(0)
    H, D, W, n = 2, 8, 3, 8
    pool = SWAKVPool(size=64, size_swa=16, page_size=1, dtype=torch.float32, head_num=H,
                     head_dim=D, swa_attention_layer_ids=[0], full_attention_layer_ids=[1],
                     device="cpu")
    mapping = torch.zeros(65, dtype=torch.int64)
    mapping[-1] = -1
    pool.register_mapping(mapping)
    full = torch.arange(40, 40 + n + 1)  # full-pool slots: beyond the 16-slot SWA buffer
    mapping[full] = torch.arange(1, n + 2)
    req_to_token = torch.zeros(2, 32, dtype=torch.int64)
    req_to_token[1, : n + 1] = full
    be = mod.TorchNativeAttnBackend(
        NS(device="cpu", req_to_token_pool=NS(req_to_token=req_to_token), token_to_kv_pool=pool)
    )
    q, k, v = (torch.randn(n + 1, H, D) for _ in range(3))

    def layer(i):
        return NS(layer_id=i, qk_head_dim=D, v_head_dim=D, tp_q_head_num=H, tp_k_head_num=H,
                  is_cross_attention=False, attn_type=AttentionType.DECODER, scaling=D**-0.5,
                  sliding_window_size=W if i == 0 else -1, k_scale=None, v_scale=None)

    def ref(lid, t):  # token t attends to tokens max(0, t - W)..t (SWA) or 0..t (full)
        s = torch.einsum("hd,khd->hk", q[t], k[: t + 1]) * D**-0.5
        if lid == 0:
            s[:, : max(t - W, 0)] = -float("inf")
        return torch.einsum("hk,khd->hd", s.softmax(-1), v[: t + 1]).reshape(-1)

    for lid in (0, 1):
        fb = NS(out_cache_loc=full[:n], encoder_out_cache_loc=None, encoder_lens=None,
                req_pool_indices=torch.tensor([1]), seq_lens=torch.tensor([n]),
                extend_prefix_lens=torch.tensor([0]), extend_seq_lens=torch.tensor([n]))
        be.init_forward_metadata(fb)
        o = be.forward_extend(q[:n].reshape(n, -1), k[:n], v[:n], layer(lid), fb)
        fb = NS(out_cache_loc=full[n:], encoder_out_cache_loc=None, encoder_lens=None,
                req_pool_indices=torch.tensor([1]), seq_lens=torch.tensor([n + 1]))
        be.init_forward_metadata(fb)
        od = be.forward_decode(q[n:].reshape(1, -1), k[n:], v[n:], layer(lid), fb)
        exp = torch.stack([ref(lid, t) for t in range(n)])
        assert torch.allclose(o, exp, atol=1e-5), ("extend", lid)
        assert torch.allclose(od[0], ref(lid, n), atol=1e-5), ("decode", lid)
    print("SWA-READS-OK")
    """
)


def _probe(*argv):
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1")
    return subprocess.run(
        [sys.executable, "-c", _SWA_READ_PROBE, *argv], capture_output=True, text=True, env=env,
        cwd=REPO / "test",
    )


def test_patched_torch_native_reads_swa_layers_through_the_mapping():
    """The installed (patched) backend matches plain attention on SWA and full layers."""
    r = _probe()
    assert "SWA-READS-OK" in r.stdout, r.stderr[-3000:]


def test_pristine_torch_native_misreads_swa_layers(tmp_path, upstream):
    """The probe above does catch the upstream bug."""
    pristine = tmp_path / "torch_native_backend.py"
    pristine.write_bytes(upstream.read(TNB))
    r = _probe(str(pristine))
    assert r.returncode != 0 and "IndexError" in r.stderr, r.stdout + r.stderr[-3000:]


# ---- status, revert, and edits by someone else ------------------------------------------------

SCHED = "srt/managers/scheduler.py"


def test_status_says_pristine_then_patched_then_modified_naming_the_file(tmp_path, upstream):
    site = minimal_site(tmp_path, upstream)
    ov = make_overlay(tmp_path)
    st = run("--overlay-dir", ov, "status", "--site-packages", site, check=True)
    assert st.stdout.splitlines()[-1].endswith(f"pristine sglang {tool.SGLANG_VERSION}")
    run("--overlay-dir", ov, "apply", "--site-packages", site, check=True)
    st = run("--overlay-dir", ov, "status", "--site-packages", site, check=True)
    series = tool.series_sha256(tool.read_series(PATCHES))[:12]
    assert f"patched, series {series} ({len(SERIES)} patches, 2 modules)" in st.stdout
    assert f"applied   {SCHED}" in st.stdout
    with open(site / "sglang" / SCHED, "a") as f:
        f.write("# a hot fix\n")
    st = run("--overlay-dir", ov, "status", "--site-packages", site, check=False)
    assert st.returncode == 3
    assert f"modified  {SCHED}" in st.stdout
    assert st.stdout.splitlines()[-1].endswith(f"modified by someone else: {SCHED}")


def test_revert_restores_the_release_and_is_idempotent(tmp_path, upstream):
    site = minimal_site(tmp_path, upstream)
    before = tree_hash(site)
    ov = make_overlay(tmp_path)
    run("--overlay-dir", ov, "apply", "--site-packages", site, check=True)
    assert tree_hash(site) != before
    r = run("--overlay-dir", ov, "revert", "--site-packages", site, check=True)
    assert "file(s) restored or removed; pristine" in r.stdout
    assert tree_hash(site) == before  # touched files pristine, our modules and manifest gone
    r = run("--overlay-dir", ov, "revert", "--site-packages", site, check=True)
    assert "already pristine" in r.stdout and tree_hash(site) == before
    st = run("--overlay-dir", ov, "status", "--site-packages", site, check=True)
    assert st.stdout.splitlines()[-1].endswith("pristine sglang " + tool.SGLANG_VERSION)


@pytest.mark.parametrize("cmd", ["apply", "revert"])
def test_apply_and_revert_refuse_a_file_someone_else_changed_and_change_nothing(
        tmp_path, upstream, cmd):
    site = minimal_site(tmp_path, upstream)
    ov = make_overlay(tmp_path)
    run("--overlay-dir", ov, "apply", "--site-packages", site, check=True)
    with open(site / "sglang" / SCHED, "a") as f:
        f.write("# a hot fix\n")
    before = tree_hash(site)
    r = run("--overlay-dir", ov, cmd, "--site-packages", site, check=False)
    assert r.returncode == 1
    assert "changed by someone else since the last apply" in r.stderr and SCHED in r.stderr
    assert tree_hash(site) == before


def test_apply_refuses_a_release_someone_else_patched(tmp_path, upstream):
    """No manifest: a touched file that is not pristine was changed outside this tool."""
    site = minimal_site(tmp_path, upstream)
    with open(site / "sglang" / SCHED, "a") as f:
        f.write("# someone's patch\n")
    r = run("apply", "--site-packages", site, check=False)
    assert r.returncode == 1 and SCHED in r.stderr
    assert not (site / "sglang" / tool.MANIFEST_NAME).exists()


def test_status_and_revert_refuse_other_versions(tmp_path, upstream):
    site = minimal_site(tmp_path, upstream)
    (site / "sglang" / "_version.py").write_text("__version__ = '0.5.23'\n")
    for cmd in ("status", "revert"):
        r = run(cmd, "--site-packages", site, check=False)
        assert r.returncode == 1 and "is not an installed sglang==0.5.15.post1" in r.stderr
