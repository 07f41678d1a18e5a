"""experiments/recipe_regret.py: what the later releases ran for a row (read, never fitted)."""

from __future__ import annotations

from conftest import experiment_module

rr = experiment_module("recipe_regret")


def _row(rid: str, ep: int, tokens: float, gpus: int = 64, model: str = "GPT-OSS-120B") -> dict:
    return {
        "id": rid,
        "model": {"name": model},
        "hardware": {"num_gpus": gpus},
        "parallel": {"tp": 1, "pp": 1, "cp": 1, "ep": ep, "microbatch": 4, "global_batch": 512},
        "measured": {"tokens_per_s_per_gpu": tokens},
    }


def test_later_releases_match_model_system_and_size_and_name_adopted_changes():
    row = _row("mbridge_25.11_DGX-B200_GPT_OSS_120B_64gpu_BF16", ep=8, tokens=1000.0)
    rec = {"tp": 1.0, "pp": 1.0, "interleave": 1.0, "cp": 1.0, "ep": 64.0}  # mapped recipe
    best = dict(rec, ep=8.0, pp=2.0)
    external = [
        _row("mbridge_26.04_DGX-B200_GPT_OSS_120B_64gpu_BF16", ep=8, tokens=1600.0),
        _row("mbridge_26.02_DGX-B200_GPT_OSS_120B_64gpu_BF16", ep=64, tokens=990.0),
        _row("mbridge_26.02.01_DGX-B200_GPT_OSS_120B_64gpu_BF16", ep=8, tokens=1700.0),
        _row(
            "mbridge_26.02_DGX-GB200_GPT_OSS_120B_64gpu_BF16", ep=8, tokens=5000.0
        ),  # other system
        _row("mbridge_26.02_DGX-B200_GPT_OSS_120B_128gpu_BF16", ep=8, tokens=5000.0, gpus=128),
        _row(
            "mbridge_26.02_DGX-B200_Qwen3_30B_a3B_64gpu_BF16",
            ep=8,
            tokens=5000.0,
            model="Qwen3-30B-A3B",
        ),
    ]
    got = rr.later_releases(row, rec, best, external)
    assert [g["release"] for g in got] == ["26.02", "26.02.01", "26.04"]  # release order
    assert [g["adopts_best"] for g in got] == [[], ["ep 64 -> 8"], ["ep 64 -> 8"]]
    assert got[1]["speed_vs_row"] == 1.7
    assert got[0]["layout"] == "tp1 pp1 vp1 cp1 ep64 mb4 gbs512"
    # no best layout (the recipe is the best): nothing is adopted
    assert all(not g["adopts_best"] for g in rr.later_releases(row, rec, None, external))
