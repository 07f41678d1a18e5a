"""Shared set-up for the test suite.

The two ``jax.config.update`` calls run at import time of this conftest, i.e. before any
test module imports :mod:`codesign` and before any JAX computation initializes the CPU
backend: 4 CPU devices (so the sharded sweep really runs on several devices, see
``test_devices.py``) and 64-bit floats (so golden values can be compared to ~1e-12).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import jax

jax.config.update("jax_num_cpu_devices", 4)
jax.config.update("jax_enable_x64", True)

import pytest  # noqa: E402

import codesign as cd  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_TOML = REPO / "experiments" / "configs" / "gpt3-175b-a100.toml"


def experiment_module(name: str):
    """The script ``experiments/<name>.py`` imported as a module (its ``main`` not run)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "experiments" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def small_doc(**strategy) -> dict:
    """A small standard run document: Llama 3 8B on 64 H100 (NVLink 4 x 8, NDR IB).

    Tiers come from the accelerator preset (nvlink4, domain 8; ib-ndr-400, domain 64).
    """
    st = {"tp": 2, "pp": 2, "dp": 16}
    st.update(strategy)
    return {
        "model": {"preset": "llama3-8b"},
        "training": {"global_batch": 512},
        "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 64},
        "strategy": st,
    }


def small_config(**strategy) -> cd.RunConfig:
    """:func:`small_doc` parsed and checked by :func:`codesign.load_run_dict`."""
    return cd.load_run_dict(small_doc(**strategy))


def example_config() -> cd.RunConfig:
    """The worked example: GPT-3 175B on 1024 A100-80GB (tp 8, pp 8 x 4 chunks, dp 16)."""
    return cd.load_run(EXAMPLE_TOML)


def with_tier(system: cd.System, i: int, **changes) -> cd.System:
    """``system`` with tier ``i`` replaced by ``dataclasses.replace(tier, **changes)``."""
    tiers = list(system.tiers)
    tiers[i] = dataclasses.replace(tiers[i], **changes)
    return dataclasses.replace(system, tiers=tuple(tiers))


@pytest.fixture
def small_cfg() -> cd.RunConfig:
    return small_config()


@pytest.fixture
def gpt3_cfg() -> cd.RunConfig:
    return example_config()


@pytest.fixture
def example_toml() -> Path:
    return EXAMPLE_TOML
