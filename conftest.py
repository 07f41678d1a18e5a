"""pytest set-up shared by the suite (``tests/``) and the doctests (``pytest --doctest-modules codesign``).

64-bit floats, as the command line runs the library (``codesign.cli.main``) and as the
examples in the docstrings assume; ``tests/conftest.py`` adds the suite's 4 CPU devices.
``codesign/cli/__main__.py`` runs the command line when imported, so doctest collection
skips it.
"""

import gc

import jax
import pytest

jax.config.update("jax_enable_x64", True)

collect_ignore = ["codesign/cli/__main__.py"]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    """On a pytest-xdist worker: collect the garbage, then freeze what is left.

    After the worker reports that it has finished, pytest still runs a full garbage
    collection or two (its unraisable-exception check), and a worker's heap of compiled
    programs and traces takes 2-3 s each.  execnet sends a worker that is still busy 5 s
    after the end a SIGINT (``gateway_base._terminate_execution``), which then lands in the
    gc callbacks of JAX or hypothesis and prints a ``PytestUnraisableExceptionWarning``.
    Collecting here, before the worker reports, keeps pytest's check (anything collected
    raises into its hook now); freezing the survivors (``gc.freeze``) makes the later
    collections skip them.
    """
    if hasattr(session.config, "workerinput"):
        gc.collect()
        gc.freeze()
