"""docs/RESULTS.md is the index of the committed results (issue 51): every file under
``benchmarks/results/`` is named there, in a row with the command that made it, the run's date and
whether it regenerates; that column agrees with ``test_results_regenerate.py``."""

import pathlib
import re
import subprocess

from test_results_regenerate import ANALYSES, FLEET, RENDERED

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
INDEX = ROOT / "docs" / "RESULTS.md"


def result_files():
    """The committed files under benchmarks/results/ (a run's new files count once added)."""
    r = subprocess.run(["git", "ls-files", "-z", "--", "benchmarks/results"], cwd=ROOT,
                       capture_output=True)
    if r.returncode == 0:
        return sorted(str(pathlib.Path(p).relative_to("benchmarks/results"))
                      for p in r.stdout.decode().split("\0") if p)
    return sorted(str(p.relative_to(RESULTS)) for p in RESULTS.rglob("*") if p.is_file())


def index_rows():
    """{file named in a row's first cell: (its row's cells)} of the index and history tables."""
    rows = {}
    for line in INDEX.read_text().splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        for name in re.findall(r"`([^`]+)`", cells[0]):
            rows[name] = cells
    return rows


def test_every_result_file_is_named_in_the_index():
    rows = index_rows()
    missing = [f for f in result_files() if f not in rows]
    assert not missing, f"not named in docs/RESULTS.md's index: {missing}"


def test_every_row_says_its_command_date_and_whether_it_regenerates():
    rows = index_rows()
    for name, cells in rows.items():
        assert len(cells) >= 4 and all(cells[:4]), (name, cells)
        assert re.search(r"20\d\d-\d\d-\d\d|committed", cells[2]), (name, cells[2])
    for stem in [c[2] for c in RENDERED] + list(FLEET):
        cells = rows.get(f"{stem}.md")
        assert cells is not None and cells[3].startswith("yes"), (stem, cells)
    for stem in ANALYSES:
        cells = rows.get(f"{stem}.md")
        assert cells is not None and cells[3].startswith("no"), (stem, cells)
