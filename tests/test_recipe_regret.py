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
    rec = {"tp": 1.0, "pp": 1.0, "interleave": 1.0, "cp": 1.0, "ep": 64.0, "microbatch": 4.0}
    best = dict(rec, ep=8.0, pp=2.0)  # the recipe as mapped, and the model's best
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


def test_a_later_micro_batch_counts_when_it_moves_the_best_s_way_at_the_row_s_batch():
    row = _row("mbridge_25.11_DGX-B200_Qwen3_30B_a3B_8gpu_FP8-MX", ep=8, tokens=1000.0, gpus=8)
    rec = {"tp": 1.0, "pp": 1.0, "interleave": 1.0, "cp": 1.0, "ep": 8.0, "microbatch": 4.0}
    best = dict(rec, microbatch=8.0)

    def later(release, mb, gbs=512):
        x = _row(
            f"mbridge_{release}_DGX-B200_Qwen3_30B_a3B_8gpu_MXFP8", ep=8, tokens=2000.0, gpus=8
        )
        x["parallel"].update(microbatch=mb, global_batch=gbs)
        return x

    ext = [later("26.02", 2), later("26.02.01", 16), later("26.04", 4), later("26.04.01", 16, 1024)]
    got = rr.later_releases(row, rec, best, ext)
    # smaller (against the best), larger (the best's way, past it), unchanged, other batch
    assert [g["adopts_best"] for g in got] == [[], ["mb 4 -> 16 (best 8)"], [], []]
    # a best with a smaller micro-batch than the recipe's: only the smaller one counts
    got = rr.later_releases(row, rec, dict(rec, microbatch=1.0), ext)
    assert [g["adopts_best"] for g in got] == [["mb 4 -> 2 (best 1)"], [], [], []]


def test_memory_scale_only_removes_points_and_is_the_model_at_one():
    """``sweep_row(memory_scale=k)`` scales the modelled memory above the fixed overhead before
    the fit test: at 1 it is the plain sweep, above 1 it can only drop points (a slower or equal
    best), and a huge scale leaves nothing that fits."""
    import argparse

    from codesign.calibration._rows import load_all_rows

    row = next(
        r for r in load_all_rows() if r["id"] == "mbridge_25.11_DGX-B200_LLAMA3_8B_8gpu_FP8-CS"
    )
    cfg, _ = rr.recipe_config(row, True)
    args = argparse.Namespace(max_tp=8, max_pp=4, max_cp=2, max_etp=1)
    vals = rr.grid_values(cfg, args)
    plain = rr.sweep_row(cfg, vals)
    same = rr.sweep_row(cfg, vals, memory_scale=1.0)
    tight = rr.sweep_row(cfg, vals, memory_scale=1.5)
    none = rr.sweep_row(cfg, vals, memory_scale=1e6)
    assert same["t_best"] == plain["t_best"] and same["feasible"] == plain["feasible"]
    assert 0 < tight["feasible"] < plain["feasible"]
    assert tight["t_best"] >= plain["t_best"]
    assert none["feasible"] == 0 and none["best"] is None


def test_other_release_matches_model_system_size_and_batch():
    def row(rid, tokens, gbs=512, seq=4096, gpus=64):
        r = _row(rid, ep=8, tokens=tokens, gpus=gpus)
        r["parallel"]["global_batch"] = gbs
        r["model"]["seq_len"] = seq
        return r

    me = row("mbridge_25.11_DGX-B200_Qwen3_30B_a3B_8gpu_FP8-MX", 1000.0, gpus=8)
    rows = [
        me,
        row("mbridge_25.09_DGX-B200_Qwen3_30B_a3B__tokendrop__8gpu_FP8unspecified", 1900.0, gpus=8),
        row("mbridge_25.11_DGX-B200_Qwen3_30B_a3B_8gpu_FP8-MX_alt", 1500.0, gpus=8),  # same release
        row("mbridge_25.09_DGX-GB200_Qwen3_30B_a3B__tokendrop__8gpu_FP8", 2500.0, gpus=8),  # system
        row("mbridge_25.09_DGX-B200_Qwen3_30B_a3B_8gpu_FP8_b", 2500.0, gbs=256, gpus=8),  # batch
        row("mbridge_25.09_DGX-B200_Qwen3_30B_a3B_16gpu_FP8", 2500.0, gpus=16),  # size
    ]
    got = rr.other_release(me, rows)
    assert [g["id"] for g in got] == [rows[1]["id"]]
    assert got[0]["release"] == "25.09" and got[0]["speed_vs_row"] == 1.9
    assert got[0]["layout"] == "tp1 pp1 vp1 cp1 ep8 mb4"
