"""The wheel stands alone: built from the sources, it holds every module and every shipped
scenario and study, and installed (not editable) into a directory outside the repository
it finds them there: ``cosim scenarios`` lists them, a shipped study resolves its shipped
scenario, and ``cosim validate`` resolves a scenario by name. (``cosim run`` from such an
install, in an empty directory, was tried by hand: README.md, "Set-up".)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("native", "phy", "learning", "cosim")
SOURCES = (*PACKAGES, "scenarios", "docs", "pyproject.toml", "README.md")


def _copy_sources(target: Path) -> Path:
    """The files a build reads, without the worktree's caches, venv, runs or build dirs."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=ignore)
        else:
            shutil.copy2(source, target / name)
    return target


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    # the build runs offline in this environment: it needs the build backend installed here
    # (a Python 3.11 venv has setuptools; a 3.12 one does not, and then this is skipped)
    pytest.importorskip("setuptools", reason="no build backend in this environment")
    src = _copy_sources(tmp_path_factory.mktemp("src"))
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(out), str(src)], check=True, cwd=src,
                   capture_output=True, text=True)
    (built,) = out.glob("aircomp_cosim-*.whl")
    return built


def _shipped(directory: Path, pattern: str) -> set[str]:
    return {path.relative_to(ROOT).as_posix() for path in directory.glob(pattern)}


def test_the_wheel_holds_every_module_scenario_and_study(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {path.relative_to(ROOT).as_posix() for package in PACKAGES
               for path in (ROOT / package).rglob("*.py") if "__pycache__" not in path.parts}
    assert modules - names == set()
    shipped = (_shipped(ROOT / "scenarios", "*.toml") | _shipped(ROOT / "scenarios", "*.sh")
               | _shipped(ROOT / "scenarios", "studies/*.toml") | {"scenarios/__init__.py"})
    in_wheel = {name.replace("cosim/scenarios/", "scenarios/", 1) for name in names
                if name.startswith("cosim/scenarios/")}
    assert in_wheel == shipped
    assert "cosim/scenarios/studies/pow_alloc_quickstart.toml" in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "cosim = cosim.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    # nothing of the repository's own outside its packages
    assert not {n for n in names if n.split("/")[0] in ("tests", "docs", "benchmarks", "runs", "data")}


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The wheel installed with pip into a directory of its own (not editable)."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                    "--target", str(target), str(wheel)], check=True, capture_output=True, text=True)
    return target


def _cosim(installed: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(installed)}
    env.pop("PYTHONSAFEPATH", None)
    code = "import sys; from cosim.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_installed_package_finds_its_scenarios_outside_the_repository(installed, tmp_path):
    probe = _cosim(installed, tmp_path, "scenarios")
    assert probe.returncode == 0, probe.stderr
    for name in ("quickstart", "paper_mnist", "pow_alloc_quickstart"):
        assert name in probe.stdout
    where = subprocess.run(
        [sys.executable, "-c", "import cosim, cosim.scenario as s; print(cosim.__file__); "
         "print(s.shipped_scenarios_dir())"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(installed)},
        capture_output=True, text=True, check=True).stdout.split()
    assert Path(where[0]).is_relative_to(installed) and Path(where[1]) == installed / "cosim" / "scenarios"
    # a shipped study names a shipped scenario; both resolve from the install
    study = _cosim(installed, tmp_path, "validate", "pow_alloc_quickstart")
    assert study.returncode == 0, study.stderr
    scenario = _cosim(installed, tmp_path, "validate", "quickstart", "--set", "rounds=2")
    assert scenario.returncode == 0, scenario.stderr
    assert "name = \"quickstart\"" in scenario.stdout
    assert list(tmp_path.iterdir()) == []  # validate writes nothing


def test_the_health_summarys_links_open_from_the_install(wheel, installed, tmp_path):
    """The health flags name pages of docs/; the wheel ships their text (cosim/docs/*.md)
    and an installed package names that copy, a file that exists."""
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"cosim/docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} <= names
    code = ("from cosim.health import DOCS, docs_link; "
            "print('\\n'.join(docs_link(link) for link in sorted(set(DOCS.values()))))")
    links = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                           env={**os.environ, "PYTHONPATH": str(installed)}, text=True,
                           check=True).stdout.split()
    assert links
    for link in links:
        page = Path(link.partition("#")[0])
        assert page.is_relative_to(installed / "cosim" / "docs") and page.is_file(), link
