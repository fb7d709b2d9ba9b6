"""The notebooks in notebooks/ are stored without outputs and run top to bottom, in order,
in a fresh Jupyter kernel each (nbclient + ipykernel, the ``test`` extra): a notebook that
no longer runs fails here. They share one working directory (``COSIM_NOTEBOOK_DIR``), so
04 reads the study 02 ran; that study runs 2 of its 3 seeds on one worker process
(``COSIM_NOTEBOOK_SEEDS``, ``COSIM_NOTEBOOK_CPUS``: 8 runs, every cell and figure as with
3 seeds on 2 CPUs, one TensorFlow start of the study's instead of two)."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_the_four_notebooks_are_there_and_linked():
    assert [path.name for path in NOTEBOOKS] == [
        "01_getting_started.ipynb", "02_phy_variation.ipynb",
        "03_custom_power_control.ipynb", "04_reading_a_study.ipynb"]
    guide = (ROOT / "docs" / "notebook.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for path in NOTEBOOKS:
        assert f"(../notebooks/{path.name})" in guide
        assert f"notebooks/{path.name}" in readme


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, (path.name, cell.id)
    first = notebook.cells[0]
    assert first.cell_type == "markdown" and "Small on purpose" in first.source


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("notebooks")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_top_to_bottom(path, work, monkeypatch):
    monkeypatch.setenv("COSIM_NOTEBOOK_DIR", str(work))
    monkeypatch.setenv("COSIM_NOTEBOOK_SEEDS", "2")
    monkeypatch.setenv("COSIM_NOTEBOOK_CPUS", "1")
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError naming the cell and its traceback
    errors = [output for cell in notebook.cells if cell.cell_type == "code"
              for output in cell.outputs if output.output_type == "error"]
    assert errors == []
