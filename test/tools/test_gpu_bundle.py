"""The offline GPU check's pieces that run anywhere: the import placeholders of
scripts/gpu_offline/sitecustomize.py and gpu_check.sh's argument handling."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
OFFLINE = ROOT / "scripts" / "gpu_offline"


def _py(code: str, absent: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(OFFLINE), ISLANDS_ABSENT_KERNELS=absent)
    return subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)


def test_absent_kernel_imports_as_placeholder_that_raises_when_used():
    code = """
import sitecustomize
from islands_absent_pkg import some_kernel
from islands_absent_pkg.sub.mod import other
print(repr(some_kernel), repr(other))
import logging
from islands_absent_pkg.jit.core import logger   # upstream sets its level at startup
logger.setLevel(logging.ERROR)
class Sub(some_kernel):                           # subclassing is fine, making one is not
    pass
for f in (lambda: some_kernel(1), lambda: other.attr(), lambda: bool(some_kernel), lambda: Sub()):
    try:
        f()
    except sitecustomize.KernelNotCarried as e:
        print("raised:", e)
    else:
        print("did not raise")
"""
    p = _py(code, "islands_absent_pkg")
    assert p.returncode == 0, p.stdout
    assert "<absent islands_absent_pkg.some_kernel> <absent islands_absent_pkg.sub.mod.other>" in p.stdout
    assert p.stdout.count("raised: islands_absent_pkg.") == 4 and "did not raise" not in p.stdout


def test_installed_package_is_never_replaced_and_others_stay_missing():
    code = """
import json, sitecustomize
assert json.dumps([1]) == "[1]"          # listed, but installed: the real module
try:
    import islands_not_listed_pkg
except ModuleNotFoundError:
    print("missing as usual")
"""
    p = _py(code, "json")
    assert p.returncode == 0 and "missing as usual" in p.stdout, p.stdout


def test_flashinfer_norm_is_an_import_error_so_sgl_kernel_uses_its_own_norms():
    """sgl_kernel.elementwise does `try: import flashinfer.norm except ImportError`; a placeholder
    there made it call flashinfer (H200, 2026-12-01). Other flashinfer modules stay placeholders:
    sglang's sampler imports flashinfer.sampling unguarded on CUDA."""
    code = """
import sitecustomize
try:
    import flashinfer.norm
except ImportError as e:
    print("import error:", e)
from flashinfer.sampling import top_k_top_p_sampling_from_probs as f
print(repr(f))
"""
    p = _py(code, "flashinfer")
    assert p.returncode == 0, p.stdout
    assert "import error: flashinfer.norm is not on this machine" in p.stdout
    assert "<absent flashinfer.sampling.top_k_top_p_sampling_from_probs>" in p.stdout


def test_gpu_check_help_and_errors():
    sh = ROOT / "scripts" / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(sh)]).returncode == 0
    h = subprocess.run(["bash", str(sh), "--help"], stdout=subprocess.PIPE, text=True, timeout=30)
    assert h.returncode == 0 and "--bundle DIR" in h.stdout and "sgl-kernel" in h.stdout
    bad = subprocess.run(["bash", str(sh), "--bogus"], stderr=subprocess.PIPE, text=True, timeout=30)
    assert bad.returncode == 2 and "unknown argument '--bogus'" in bad.stderr
    b = ROOT / "scripts" / "gpu_bundle.sh"
    assert subprocess.run(["bash", "-n", str(b)]).returncode == 0
    hb = subprocess.run(["bash", str(b), "--help"], stdout=subprocess.PIPE, text=True, timeout=30)
    assert hb.returncode == 0 and "site.tar.xz" in hb.stdout and "--with-kernel" in hb.stdout
    assert "--target 0.5.23" in hb.stdout and ".gpu-main" in hb.stdout and "torch==2.14.1" in hb.stdout
    bt = subprocess.run(["bash", str(b), "--target", "0.6"], stderr=subprocess.PIPE, text=True, timeout=30)
    assert bt.returncode == 2 and "unknown --target '0.6'" in bt.stderr
    assert "--bundle-main DIR" in h.stdout and "main_islands_0.17" in h.stdout
    for d in (".gpu", ".gpu-main"):  # build outputs (upstream code): never committed
        assert subprocess.run(["git", "check-ignore", "-q", f"{d}/site.tar.xz"], cwd=ROOT).returncode == 0


MAIN_BUNDLE = ROOT / ".gpu-main" / "site.tar.xz"
MAIN_PY = ROOT / ".venv-main" / "bin" / "python"


@pytest.mark.skipif(not (MAIN_BUNDLE.is_file() and MAIN_PY.exists()),
                    reason="needs scripts/gpu_bundle.sh --target 0.5.23 and .venv-main")
def test_main_bundle_fits_a_call_and_its_trees_import_with_the_patched_modules(tmp_path):
    """The 0.5.23 bundle as gpu_check.sh --bundle-main unpacks it: main/ is stock (series-stock),
    main/ + the overlay has the islands series; each imports with .venv-main's CPU torch."""
    import json
    import tarfile

    tracked = sum((ROOT / f).stat().st_size for f in subprocess.run(
        ["git", "ls-files"], cwd=ROOT, stdout=subprocess.PIPE, text=True).stdout.split("\n")
        if f and (ROOT / f).is_file())
    assert MAIN_BUNDLE.stat().st_size + tracked < 64 * 2**20 - 4 * 2**20  # with 4 MiB to spare
    with tarfile.open(MAIN_BUNDLE) as t:
        t.extractall(tmp_path)
    info = json.loads((tmp_path / "bundle.json").read_text())
    assert info["target"] == "0.5.23" and info["python"] == "cp312"
    assert set(info["series"]["main"]) < set(info["series"]["main_islands"])
    main, isl = tmp_path / "main", tmp_path / "main_islands"
    subprocess.run(["cp", "-a", str(main), str(isl)], check=True)
    subprocess.run(["cp", "-a", f"{tmp_path}/main_islands.overlay/.", f"{isl}/"], check=True)
    assert not list(main.rglob("*.so")) and not (main / "sglang" / "multimodal_gen").exists()
    code = """
import importlib.util as u, logging, sglang
import sglang.launch_server, sglang.srt.managers.scheduler
from sglang.srt.server_args import prepare_server_args
logging.disable(logging.WARNING)
print(sglang.__version__, sglang.__file__)
print("islands", u.find_spec("sglang.srt.mem_cache.swa_island_radix_cache") is not None)
try:
    print("flag", prepare_server_args(["--model-path", "x", "--enable-swa-islands"]).enable_swa_islands)
except SystemExit:
    print("flag refused")
"""
    for tree, islands in ((main, False), (isl, True)):
        env = dict(os.environ, PYTHONPATH=str(tree), SGLANG_USE_CPU_ENGINE="1")
        p = subprocess.run([str(MAIN_PY), "-W", "ignore", "-c", code], env=env, cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
        assert f"0.5.23 {tree}/sglang/__init__.py" in p.stdout, p.stdout[-3000:]
        assert f"islands {islands}" in p.stdout, p.stdout[-3000:]
        assert ("flag True" if islands else "flag refused") in p.stdout, p.stdout[-3000:]


def test_gemma4_tiny_model_has_what_sglangs_swa_pool_reads(tmp_path):
    """The first H200 boot of the offline gate stopped in SGLang's KV pool init, which reads
    hf_text_config.swa_num_key_value_heads for Gemma 4 without a default."""
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_tiny_models.py"), "--arch", "gemma4",
                        "--out", str(tmp_path / "g4")], cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:]
    from sglang.srt.configs.model_config import ModelConfig

    mc = ModelConfig(str(tmp_path / "g4"))
    assert mc.is_hybrid_swa and mc.is_hybrid_swa_compress  # the branch that reads it
    assert mc.hf_text_config.swa_num_key_value_heads == mc.hf_text_config.num_key_value_heads == 2
