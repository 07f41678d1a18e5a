"""codesign's ``jit``: XLA:CPU compiler options that change compile time, never a value.

See :mod:`codesign._compile`; ``experiments/bench_compile.py`` measures the times.
"""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import numpy as np
from conftest import REPO, small_config

from codesign._compile import compiler_options, jit
from codesign.step import evaluate_unchecked


def test_on_cpu_the_step_compiles_with_the_options_and_gives_the_same_bits():
    assert jax.default_backend() == "cpu"
    assert compiler_options() == {"xla_cpu_use_fusion_emitters": False}
    assert compiler_options({"xla_backend_optimization_level": 0}) == {
        "xla_cpu_use_fusion_emitters": False,
        "xla_backend_optimization_level": 0,
    }
    specs = small_config(tp=2, pp=4, dp=8, interleave=2).specs()

    def step(*args):  # a fresh function: JAX shares a jit cache among jits of one function
        return evaluate_unchecked(*args)

    ours = jit(step)
    theirs = jax.jit(step)  # XLA's default emitters
    text = ours.lower(*specs).compile().as_text()
    assert text  # the lazily built jax.jit answers jax.jit's methods
    a, b = ours(*specs), theirs(*specs)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert ours._cache_size() == 1


def _run(code: str, xla_flags: str) -> str:
    env = {**os.environ, "XLA_FLAGS": xla_flags, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


IMPORT_ALL = (
    "import jax, codesign, codesign.step, codesign.search, codesign.calibration, "
    "codesign.sites, codesign.sensitivity\n"
)


def test_importing_codesign_initializes_no_backend_and_the_users_flag_wins():
    # Every module-level jit is built lazily: the device count can still be set after import.
    code = (
        IMPORT_ALL + "jax.config.update('jax_num_cpu_devices', 3)\n"
        "from codesign._compile import compiler_options\n"
        "print(len(jax.devices()), compiler_options())"
    )
    assert _run(code, "") == "3 {'xla_cpu_use_fusion_emitters': False}"
    # A user who sets the option in XLA_FLAGS gets XLA's handling of it, not ours.
    assert _run(code, "--xla_cpu_use_fusion_emitters=true") == "3 None"
