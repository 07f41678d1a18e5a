"""Every notebook in ``notebooks/`` (jupytext percent-format ``.py``) runs top to bottom.

Each notebook is converted with jupytext and executed by nbclient in a fresh ``python3``
kernel running this interpreter, with ``CODESIGN_NOTEBOOK_SMALL=1`` so sweeps stay small.
A cell that raises fails the test, naming the cell.  New notebooks are picked up
automatically.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import ipykernel  # noqa: F401  (the test extras install it; a missing one must fail)
import jupytext
import nbclient
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.py"))
KERNEL = "python3"


def _ensure_kernel() -> None:
    """Make a ``python3`` kernelspec findable; install one into this environment if needed.

    jupyter_client runs a kernelspec whose ``argv[0]`` is ``python`` with ``sys.executable``,
    and ipykernel's own spec (used when no ``python3`` spec is installed) also points at this
    interpreter, so the kernel sees the same packages as the tests.
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec(KERNEL)
    except NoSuchKernel:
        from ipykernel.kernelspec import install

        install(prefix=sys.prefix, kernel_name=KERNEL)
        KernelSpecManager().get_kernel_spec(KERNEL)


def test_notebooks_found():
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOK_DIR}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, monkeypatch: pytest.MonkeyPatch):
    _ensure_kernel()
    # The kernel inherits this process's environment when it starts.
    monkeypatch.setenv("CODESIGN_NOTEBOOK_SMALL", "1")
    # ... and imports this checkout's codesign, installed or not.
    path_env = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path_env))

    nb = jupytext.read(path)
    # Run with the notebooks' own folder as the working directory, where Jupyter starts (so a
    # notebook named like a package would shadow it, as notebooks/codesign.py once did), and
    # check that the notebook writes nothing there: it must find the repository itself.
    before = sorted(os.listdir(NOTEBOOK_DIR))
    client = nbclient.NotebookClient(
        nb,
        timeout=600,
        kernel_name=KERNEL,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as e:
        msg = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # drop the traceback's ANSI colours
        pytest.fail(f"{path.name}: a cell raised\n{msg}", pytrace=False)

    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors, f"{path.name}: error outputs {[(o['ename'], o['evalue']) for o in errors]}"
    after = sorted(os.listdir(NOTEBOOK_DIR))
    assert after == before, (
        f"{path.name} wrote {sorted(set(after) - set(before))} into its working directory"
    )


SHADOWED = {"codesign", "jax", "jaxlib", "numpy", "optax", "flax", "matplotlib", "tqdm"}


def test_notebook_names_never_shadow_a_package():
    """Jupyter and ``python notebooks/x.py`` put ``notebooks/`` first on ``sys.path``."""
    for path in NOTEBOOKS:
        assert path.stem not in SHADOWED, f"{path.name} would shadow the {path.stem} package"
