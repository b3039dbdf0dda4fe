"""benchmarks/front_page_plot.py (the README's picture): it plots the committed results into a
PNG, and a missing input file or key stops it with a message naming the file (seconds, no server)."""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "front_page_plot.py"
RESULTS = ROOT / "benchmarks" / "results"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_help_names_the_inputs():
    res = run("--help")
    assert res.returncode == 0, res.stderr
    for opt in ("--hold", "--hold-main", "--admission", "--admission-main", "--pool", "--out"):
        assert opt in res.stdout


def test_plots_the_committed_results(tmp_path):
    out = tmp_path / "sub" / "front_page.png"
    res = run("--out", str(out))
    assert res.returncode == 0, res.stderr
    assert f"wrote {out}" in res.stdout
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000  # two panels of bars and text, not an empty canvas
    # the committed picture is the one this script makes (same inputs, same size in pixels)
    committed = RESULTS / "front_page.png"
    assert committed.is_file(), "benchmarks/results/front_page.png is missing: the README shows it"
    assert committed.read_bytes()[16:24] == data[16:24]  # IHDR width and height


def test_a_missing_input_file_is_named(tmp_path):
    missing = tmp_path / "no_such_hold.json"
    res = run("--hold", str(missing), "--out", str(tmp_path / "x.png"))
    assert res.returncode == 2
    assert "no_such_hold.json" in res.stderr and "no such file" in res.stderr
    assert not (tmp_path / "x.png").exists()


def test_a_missing_key_is_named_with_its_file(tmp_path):
    adm = json.loads((RESULTS / "admission_quick_main.json").read_text())
    del adm["arms"]["main_0.17"]
    path = tmp_path / "admission_without_main.json"
    path.write_text(json.dumps(adm))
    res = run("--admission-main", str(path), "--out", str(tmp_path / "x.png"))
    assert res.returncode == 2
    assert "admission_without_main.json" in res.stderr and "'main_0.17'" in res.stderr
    res = run("--pool", "0.42", "--out", str(tmp_path / "x.png"))
    assert res.returncode == 2 and "'upstream_0.42'" in res.stderr
    assert not (tmp_path / "x.png").exists()


def test_islands_on_main_is_optional_in_the_running_panel(tmp_path):
    adm = json.loads((RESULTS / "admission_quick_main.json").read_text())
    adm["arms"].pop("main_islands_0.17", None)
    path = tmp_path / "admission_main_without_islands.json"
    path.write_text(json.dumps(adm))
    res = run("--admission-main", str(path), "--out", str(tmp_path / "x.png"))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "x.png").is_file()
