"""The architecture is enforced: rooms are layered (import-linter), modules stay small, no module reaches
into another's private names, and every cache is owned by symcost.caching."""
import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import symcost
from symcost import caching

from conftest import ROOT

MODULES = sorted((ROOT / "symcost").rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_module_is_over_400_lines():
    big = {str(p.relative_to(ROOT)): n for p in MODULES if (n := len(p.read_text().splitlines())) > 400}
    assert big == {}


def _private_uses(path: Path) -> list[str]:
    """Private names this module takes from another symcost module: ``from .x import _y`` or ``x._y``."""
    tree = ast.parse(path.read_text())
    modules, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("symcost")):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    found.append(f"from {'.' * node.level}{node.module or ''} import {a.name}")
                elif node.module is None or a.name[:1].islower():
                    modules.add(a.asname or a.name)   # `from . import caching`: a module (or a function)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("symcost"):
                    modules.add((a.asname or a.name).split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            found.append(f"{node.value.id}.{node.attr}")
    return found


def test_no_module_imports_a_private_name_of_another():
    found = {_module_name(p): uses for p in MODULES if (uses := _private_uses(p))}
    assert found == {}


def test_the_private_name_check_catches_both_forms(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from .plan import _wins_when\nfrom . import notation\nnotation._parse('A[I]')\n")
    assert _private_uses(bad) == ["from .plan import _wins_when", "notation._parse"]


def test_every_cache_is_owned_by_caching():
    """No functools cache outside symcost.caching: every cache is bounded and cleared by clear_caches()."""
    offenders = [str(p.relative_to(ROOT)) for p in MODULES
                 if p.name != "caching.py" and ("lru_cache" in p.read_text() or "functools.cache" in p.read_text())]
    assert offenders == []
    for fn in caching.registered():
        assert fn.cache_info().maxsize is not None


def test_clear_caches_empties_every_cache():
    symcost.derive("In[B_X, D_Y] *_D Win[D, F_Y] *_F Wout[F_Y, D] -> Out[B_X, D_Y]", mesh="X=4,Y=4")
    assert caching.entries() > 0
    symcost.clear_caches()
    assert caching.entries() == 0


@pytest.mark.skipif(shutil.which("lint-imports", path=str(Path(sys.executable).parent)) is None,
                    reason="import-linter is in the test extra: pip install -e '.[test]'")
def test_the_layering_contract_holds():
    exe = Path(sys.executable).parent / "lint-imports"
    r = subprocess.run([str(exe)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:]
    contracts = (ROOT / "pyproject.toml").read_text().count("[[tool.importlinter.contracts]]")
    assert contracts >= 5 and f"{contracts} kept, 0 broken" in r.stdout


def test_one_version():
    """The version is written once, in symcost/__init__.py: pyproject.toml declares it dynamic and names that
    attribute (setuptools reads it there when it builds the package), and writes no version of its own."""
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in config["project"] and "version" in config["project"]["dynamic"]
    assert config["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "symcost.__version__"}
    assert re.match(r"\d+\.\d+", symcost.__version__)          # a release number, whatever suffix follows


def test_a_timing_test_outside_its_folder_is_refused():
    """``make test`` runs the tests marked timing from ``tests/device`` alone: one elsewhere would run
    beside the rest, so collecting it is an error that names it."""
    from conftest import _timing_tests_stay_home

    class Item:
        def __init__(self, nodeid, timing):
            self.nodeid, self.timing = nodeid, timing

        def get_closest_marker(self, name):
            return name == "timing" and self.timing or None

    _timing_tests_stay_home([Item("tests/device/test_device.py::test_a", True), Item("tests/x.py::test_b", False)])
    with pytest.raises(pytest.UsageError, match="tests/engine/test_y.py::test_c"):
        _timing_tests_stay_home([Item("tests/engine/test_y.py::test_c", True)])


def test_mypy_checks_every_room_below_the_upper_rooms():
    """``[tool.mypy]`` lists every room of tiers 1 to 5 (the first layering contract's layers below the upper
    rooms), and no module is exempt from it (no ``ignore_errors`` override)."""
    import tomllib
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    tiers = config["tool"]["importlinter"]["contracts"][0]["layers"][1:]
    rooms = {r.strip() for tier in tiers for r in tier.replace("|", ":").split(":")}
    checked = {Path(f).with_suffix("").name for f in config["tool"]["mypy"]["files"]}
    assert rooms and rooms == checked
    assert not [o for o in config["tool"]["mypy"].get("overrides", []) if o.get("ignore_errors")]
