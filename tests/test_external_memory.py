"""experiments/external_memory.py: published peak memory, predicted as the recipes ran."""

from __future__ import annotations

import json

import pytest
from conftest import experiment_module

em = experiment_module("external_memory")
ROWS = json.loads(em.DATA.read_text())


def test_every_row_cites_megatron_bridge_at_a_commit_and_maps_as_written():
    """Each row names the file and commit its numbers come from, and loads to the layout,
    batch, precision and optimizer state its ``run`` states (no silent default)."""
    assert len(ROWS) >= 2
    for ext in ROWS:
        src = ext["source"]
        assert src["url"].startswith("https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/")
        assert len(src["url"].split("/blob/")[1].split("/")[0]) == 40  # a full commit hash
        assert src["quote"] and src["recipe"]
        run, cfg = ext["run"], em.row_config(ext)
        for k in ("tp", "pp", "cp", "dp", "ep", "etp", "microbatch"):
            assert float(getattr(cfg.strategy, k)) == run["strategy"][k], (ext["id"], k)
        tr = run["training"]
        assert float(cfg.training.global_batch) == tr["global_batch"]
        assert cfg.training.precision == tr["precision"]
        assert float(cfg.training.optimizer_state_bytes) == tr["optimizer_state_bytes"]
        assert float(cfg.system.num_accelerators) == run["system"]["num_accelerators"]
        assert ext["measured"]["peak_allocated_gb"] > 0


def test_measured_memory_is_read_as_decimal_gigabytes():
    """Megatron-Bridge's logger divides bytes by 1e9; the model counts 2^30-byte GiB."""
    ext = ROWS[0]
    gib = em.measured_gib(ext)
    assert gib == pytest.approx(ext["measured"]["peak_allocated_gb"] * 1e9 / 2**30)


def test_recompute_rows_differ_only_in_their_recomputation():
    """The Moonlight study changes one setting at a time: its rows' runs are identical except
    for ``recompute`` and ``recompute_modules``, and recomputing more never raises the model's
    memory."""
    study = [e for e in ROWS if e["group"].startswith("Moonlight")]
    assert len(study) >= 2
    drop = {"recompute", "recompute_modules"}

    def rest(e):
        return {
            **e["run"],
            "strategy": {k: v for k, v in e["run"]["strategy"].items() if k not in drop},
        }

    assert all(rest(e) == rest(study[0]) for e in study)
    import codesign as cd

    mem = {
        tuple(e["run"]["strategy"].get("recompute_modules", [])): float(
            cd.evaluate(*em.row_config(e).specs()).memory_gb["total"]
        )
        for e in study
    }
    none = mem[()]
    assert all(v <= none + 1e-9 for v in mem.values())
    if ("mla_up_proj",) in mem and ("mla_up_proj", "mlp") in mem:
        assert mem[("mla_up_proj", "mlp")] <= mem[("mla_up_proj",)] + 1e-9
