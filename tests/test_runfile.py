"""Run files written from configurations read back to the same specs and the same report."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
import warnings

import jax
import numpy as np
import pytest
from conftest import example_config, small_doc

import codesign as cd
from codesign.runfile import run_toml


def load(doc):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cd.load_run_dict(doc)


def frontier_doc():
    """Every kind of leaf set away from its default: MLA + MoE folding, FP8, stage layout,
    partial and module recomputation, offloading, placement, overlap and dispatch flags."""
    doc = {
        "model": {
            "layers": 61, "hidden": 7168, "heads": 128, "kv_heads": 128, "ffn_hidden": 18432,
            "vocab": 129280, "seq_len": 4096, "gated_mlp": True, "moe_experts": 256,
            "moe_top_k": 8, "moe_ffn_hidden": 2048, "moe_shared_experts": 1, "moe_layers": 58,
            "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 128, "v_head_dim": 128,
        },
        "training": {"global_batch": 2048, "precision": "mxfp8", "tokens": 1e12},
        "system": {"accelerator": "gb200", "num_accelerators": 256,
                   "tiers": [{"preset": "nvlink5-nvl72", "domain": 64},
                             {"preset": "ib-ndr-400", "domain": 256, "oversubscription": 2.0}]},
        "strategy": {
            "tp": 1, "pp": 8, "dp": 32, "ep": 32, "etp": 1, "interleave": 4,
            "pp_first_layers": 7, "pp_last_layers": 6, "recompute": "selective",
            "recompute_modules": ["core_attn", "mla_up_proj", "moe_act"],
            "offload_activations": 0.25, "offload_optimizer": 0.5, "overlap_moe_comm": True,
            "moe_hierarchical_dispatch": True, "moe_capacity_factor": 1.25, "zero": 1,
            "placement": ["tp", "ep", "cp", "dp", "pp"],
        },
    }  # fmt: skip
    return doc


CASES = {
    "gpt3-example": example_config,
    "llama8b-full-fraction": lambda: load(
        small_doc(recompute="full", recompute_fraction=0.375, zero=3, cp=2, dp=8)
    ),
    "deepseek-frontier": lambda: load(frontier_doc()),
}


@pytest.mark.parametrize("name", list(CASES))
def test_run_file_round_trip_is_exact(name):
    cfg = CASES[name]()
    again = load(tomllib.loads(run_toml(cfg)))
    a, b = jax.tree_util.tree_leaves(cfg.specs()), jax.tree_util.tree_leaves(again.specs())
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    assert again.training.precision == cfg.training.precision
    r1, r2 = cd.evaluate(*cfg.specs()), cd.evaluate(*again.specs())
    for x, y in zip(jax.tree_util.tree_leaves(r1), jax.tree_util.tree_leaves(r2), strict=True):
        assert np.array_equal(np.asarray(x), np.asarray(y))


def test_soft_choices_are_refused():
    import dataclasses

    cfg = example_config()
    soft = dataclasses.replace(cfg.strategy, recompute=np.array([0.5, 0.5, 0.0]))
    with pytest.raises(ValueError, match="not one-hot"):
        run_toml(dataclasses.replace(cfg, strategy=soft))


def test_sweep_writes_a_run_that_evaluate_reproduces(tmp_path):
    """``codesign sweep PROBLEM --write-run OUT`` then ``codesign evaluate OUT``: same report."""
    out = tmp_path / "best.toml"
    problem = "experiments/problems/llama3-8b-64xh100-step.toml"
    sweep = subprocess.run(
        [sys.executable, "-m", "codesign.cli", "sweep", problem, "--json", "--no-progress",
         "--write-run", str(out)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    chosen = json.loads(sweep.stdout)["report"]
    ev = subprocess.run(
        [sys.executable, "-m", "codesign.cli", "evaluate", str(out), "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    again = json.loads(ev.stdout)
    assert again["step_time_s"] == chosen["step_time_s"]
    assert again["memory_gb"] == chosen["memory_gb"]
    # the expected error of the preset the values came from travels with them
    assert chosen["config"]["held_out"]["rows"] > 0
    assert again["config"]["held_out"] == chosen["config"]["held_out"]
