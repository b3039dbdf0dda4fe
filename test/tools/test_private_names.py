"""Private upstream names our 0.5.23 modules touch (issue 59): ``islands_tools.private_names``
reads them off the source, against the pristine 0.5.23 wheel, and ``docs/PR_MAIN.md`` names each
one with its reason. The scanner is checked on small sources first, so that an empty list means
none and not a scanner that sees nothing."""

from __future__ import annotations

import pathlib
import re
import textwrap

import pytest

from islands_tools import private_names as pn

ROOT = pathlib.Path(__file__).resolve().parents[2]

BASE = textwrap.dedent(
    """
    _TABLE = {}

    def _helper(x):
        return x

    class Base:
        def __init__(self):
            self._cursor = None
            self.public = 1

        def _step(self):
            return self._cursor

        def run(self):
            return self._step()

    class Other:
        def _split(self, n):
            return n
    """
)


def _index() -> pn.UpstreamIndex:
    return pn.UpstreamIndex(
        {"srt/mem_cache/base.py": BASE, "srt/mem_cache/__init__.py": ""}
    )


def _rows(source: str) -> list:
    ours = {"srt/mem_cache/ours.py": textwrap.dedent(source)}
    return [(t.name, t.how, t.owner) for t in pn.touches(ours, _index())]


def test_an_import_of_a_private_upstream_name_is_listed():
    rows = _rows("from sglang.srt.mem_cache.base import _helper, Base\n")
    assert rows == [("_helper", "import", "srt/mem_cache/base.py")]


def test_overrides_and_inherited_state_are_listed_with_their_owner():
    rows = _rows(
        """
        from sglang.srt.mem_cache.base import Base

        class Mine(Base):
            def _step(self):
                self._cursor = 3
                self._mine = 4
                return super()._step() + self._mine
        """
    )
    owner = "srt/mem_cache/base.py:Base"
    assert rows == [
        ("_cursor", "write", owner),
        ("_step", "call", owner),
        ("_step", "override", owner),
    ]


def test_private_state_of_other_upstream_objects_is_listed():
    rows = _rows(
        """
        def go(tree):
            tree._split(3)
            return tree._cursor
        """
    )
    assert rows == [
        ("_cursor", "read", "srt/mem_cache/base.py:Base"),
        ("_split", "call", "srt/mem_cache/base.py:Other"),
    ]


def test_our_own_private_names_and_public_ones_are_not_listed():
    rows = _rows(
        """
        from sglang.srt.mem_cache.base import Base

        class Mine(Base):
            def _own(self):
                self._also_own = 1
                return self.public + self._also_own

        class Free:
            def _step(self):
                return self._cursor
        """
    )
    assert rows == []


def _documented() -> set:
    text = (ROOT / "docs" / "PR_MAIN.md").read_text()
    section = text.split("## Private upstream names our modules touch", 1)[1]
    section = section.split("\n## ", 1)[0]
    out = set()
    for line in section.splitlines():
        m = re.match(r"\| `(_\w+)` \| ([a-z, ]+) \| `([\w.]+)` \| (.+) \|$", line)
        if m:
            assert len(m.group(4).strip()) > 20, f"no reason given for {m.group(1)}"
            for how in m.group(2).split(", "):
                out.add((m.group(3), m.group(1), how))
    return out


def test_docs_name_every_private_upstream_name_our_modules_touch():
    from islands_tools.patches import main_target as mt
    from islands_tools.patches.lib import Upstream

    wheels = sorted(mt.CACHE.glob(f"sglang-{mt.SGLANG_VERSION}-*.whl"))
    if not wheels:
        pytest.skip(
            "no pristine 0.5.23 wheel in .cache/wheels-main (scripts/setup_main.sh)"
        )
    upstream = Upstream(wheels[0])
    index = pn.UpstreamIndex(pn.upstream_files(upstream))
    ours = {
        rel: path.read_text()
        for rel, path in mt.overlay("islands", upstream).items()
        if rel.endswith(".py")
    }
    assert "srt/mem_cache/unified_cache/components/swa_island.py" in ours
    found = {
        (pathlib.Path(t.module).name, t.name, t.how) for t in pn.touches(ours, index)
    }
    documented = _documented()
    assert found == documented, (
        f"in the code, not in docs/PR_MAIN.md: {sorted(found - documented)}; "
        f"in docs/PR_MAIN.md, not in the code: {sorted(documented - found)}"
    )
