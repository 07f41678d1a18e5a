"""Megatron-Bridge rows: every row maps to a run document with the recipe's settings."""

from __future__ import annotations

import json

import pytest

from codesign.calibration._bridge import BRIDGE_RECIPES, bridge_key, deepseek_stage_layers
from codesign.calibration._rows import (
    BRIDGE_DATA_PATH,
    DATA_PATH,
    load_all_rows,
    load_rows,
    measured_step_time,
    row_to_doc,
    source_short,
)
from codesign.config import load_run_dict

MODEL_KEYS = {
    "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "head_dim",
    "gated_mlp", "tied_embeddings", "dropout", "moe_experts", "moe_top_k", "moe_ffn_hidden",
    "moe_shared_experts", "moe_layers", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
    "qk_nope_head_dim", "v_head_dim", "attention_window", "window_layers", "mtp_layers",
}  # fmt: skip
TRAINING_KEYS = {"global_batch", "precision", "grad_reduce_bytes", "optimizer_state_bytes"}
STRATEGY_KEYS = {
    "tp", "pp", "dp", "cp", "ep", "etp", "microbatch", "interleave", "sequence_parallel",
    "recompute", "recompute_modules", "recompute_fraction", "recompute_num_layers", "zero",
    "overlap_dp", "overlap_param_gather", "overlap_tp", "flash_attention", "pp_first_layers",
    "pp_last_layers", "pp_embedding_in_split", "pp_loss_in_split", "offload_activations",
    "offload_optimizer",
    "overlap_moe_comm", "moe_hierarchical_dispatch", "moe_permute_copies", "offload_whole_layers", "moe_capacity_factor",
}  # fmt: skip
PRECISIONS = {"bf16", "fp16", "fp8", "fp8-delayed", "fp8-current", "mxfp8", "fp4", "nvfp4", "mxfp4"}
MODULES = {"core_attn", "layernorm", "mlp", "moe_act", "moe", "mla_up_proj"}

ROWS = load_rows(BRIDGE_DATA_PATH)


def test_data_copy_is_the_shared_file():
    assert len(ROWS) == 60
    assert all(r["source"]["paper"].startswith("NVIDIA Megatron-Bridge") for r in ROWS)
    assert len(load_all_rows()) == len(load_rows(DATA_PATH)) + 60


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_row_maps_to_document_keys(row):
    assert source_short(row) == "Bridge"
    assert bridge_key(row) in BRIDGE_RECIPES
    doc, notes = row_to_doc(row)
    assert set(doc["model"]) <= MODEL_KEYS
    assert set(doc["training"]) <= TRAINING_KEYS
    assert set(doc["strategy"]) <= STRATEGY_KEYS
    assert doc["training"]["precision"] in PRECISIONS
    assert set(doc["strategy"].get("recompute_modules", [])) <= MODULES
    assert doc["efficiency"] == {"preset": "uncalibrated", "stack": "bridge"}
    s = doc["strategy"]
    assert s["tp"] * s["pp"] * s["dp"] * s["cp"] == doc["system"]["num_accelerators"]
    # 25.09 / 25.11 offload activations only with Megatron-Core's whole-layer cpu_offloading.
    assert s["offload_whole_layers"] is True
    assert all(isinstance(n, str) for n in notes)


def test_step_time_from_tokens_per_gpu():
    for row in ROWS:
        t, how = measured_step_time(row)
        assert how == "tokens_per_s_per_gpu"
        p, m = row["parallel"], row["measured"]
        want = p["global_batch"] * row["model"]["seq_len"]
        want /= m["tokens_per_s_per_gpu"] * row["hardware"]["num_gpus"]
        assert t == pytest.approx(want)
        assert t == pytest.approx(row["derived"]["iteration_time_s"], rel=2e-3)


def test_every_recipe_fact_has_a_source():
    for key, facts in BRIDGE_RECIPES.items():
        assert facts, key
        for name, fact in facts.items():
            assert isinstance(fact["source"], str) and len(fact["source"]) > 10, (key, name)


def test_specific_recipe_settings():
    by_id = {r["id"]: r for r in ROWS}
    doc, _ = row_to_doc(
        by_id["mbridge_25.09_DGX-H100_DeepSeekV3__dropless__1024gpu_FP8unspecified"]
    )
    s = doc["strategy"]
    assert (s["pp_first_layers"], s["pp_last_layers"]) == (7, 6)
    assert s["moe_hierarchical_dispatch"] and s["overlap_moe_comm"]
    assert s["moe_permute_copies"] == 1.0  # DeepEP: one permute after its fused dispatch
    assert s["recompute"] == "selective" and s["recompute_modules"] == ["mla_up_proj", "mlp"]
    # HybridEP permutes once beside its dispatch; the alltoall dispatcher permutes and sorts.
    qwen = "mbridge_25.11_DGX-GB200_Qwen3_235B_a22B_256gpu_BF16"
    assert row_to_doc(by_id[qwen])[0]["strategy"]["moe_permute_copies"] == 1.0
    oss = "mbridge_25.11_DGX-GB200_GPT_OSS_120B_64gpu_BF16"
    assert row_to_doc(by_id[oss])[0]["strategy"]["moe_permute_copies"] == 2.0
    # 25.09's token-drop recipes (apply_moe_token_drop: capacity 1.0, padded); 25.11 dropless.
    capacity = {r["id"]: row_to_doc(r)[0]["strategy"]["moe_capacity_factor"] for r in ROWS}
    assert {i for i, c in capacity.items() if c == 1.0} == {i for i in capacity if "tokendrop" in i}
    assert set(capacity.values()) == {0.0, 1.0}
    # GPT-OSS on B200: the page prints the base config's EP 8, the recipe that set its MBS 4
    # ran EP 64 (r0.2.0 workload_base_configs.py); the row's notes say so.
    b200 = by_id["mbridge_25.11_DGX-B200_GPT_OSS_120B_64gpu_BF16"]
    assert b200["parallel"]["ep"] == 8
    doc_b, notes_b = row_to_doc(b200)
    assert doc_b["strategy"]["ep"] == 64 and doc_b["strategy"]["microbatch"] == 4
    assert any("ep 64 from the recipe (the page prints 8)" in n for n in notes_b)
    assert doc["model"]["moe_layers"] == 58 and doc["model"]["kv_lora_rank"] == 512
    doc, _ = row_to_doc(by_id["mbridge_25.09_DGX-GB200_LLAMA3.1_405B_128gpu_FP8unspecified"])
    assert doc["strategy"]["zero"] == 3
    assert doc["strategy"]["offload_activations"] == pytest.approx(95 / 126, abs=1e-3)
    assert doc["training"]["precision"] == "fp8-current"
    doc, _ = row_to_doc(by_id["mbridge_25.09_DGX-GB200_LLAMA3.1_405B_128gpu_FP8unspecified_alt"])
    assert doc["training"]["precision"] == "mxfp8"
    assert doc["strategy"]["pp_embedding_in_split"] and doc["strategy"]["pp_loss_in_split"]
    assert deepseek_stage_layers(4, 4)[:2] == (16, 13)
    assert deepseek_stage_layers(16, 1)[:2] == (4, 1)


def test_data_file_is_valid_json():
    assert json.loads(BRIDGE_DATA_PATH.read_text()) == ROWS


INCONSISTENT = {
    "mbridge_25.09_DGX-GB200_DeepSeekV3__tokendrop__256gpu_FP8unspecified_alt": (
        32,
        "EP 64 at PP 8 on 256 GPUs: a pipeline stage has 32 ranks, fewer than the expert "
        "group (the row's parenthesised figures; Megatron-Core cannot lay this out either)",
    ),
}
"""Rows whose published layout no Megatron-Core run could have had: the EP the mapping
assumes instead (the largest valid one), and why."""
FROM_RECIPE_EP = {"mbridge_25.11_DGX-B200_GPT_OSS_120B_64gpu_BF16": 64}
"""Rows whose recipe ran another EP than the page prints (a recipe fact with its source)."""


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_row_loads(row):
    doc, notes = row_to_doc(row)
    cfg = load_run_dict(doc)
    if row["id"] in INCONSISTENT:
        ep = INCONSISTENT[row["id"]][0]
        assert int(cfg.strategy.ep) == ep != row["parallel"]["ep"]
        assert any(n.startswith(f"ASSUMED ep {ep}") for n in notes)
    else:
        want = FROM_RECIPE_EP.get(row["id"], row["parallel"].get("ep", 1))
        assert int(cfg.strategy.ep) == want
        assert not any(n.startswith("ASSUMED ep") for n in notes)
        assert any(n.startswith(f"ep {want} from the recipe") for n in notes) == (
            row["id"] in FROM_RECIPE_EP
        )


def test_contradicted_pairs_are_found_by_rule():
    """Two releases of one recipe (same system, model, number format, batch and layout)
    whose step times differ by more than 1.5x: both rows are kept out of the fit, whichever
    the model prefers; pairs within 1.5x (every Llama and GB200 pair) are not."""
    from codesign.calibration._dataset import CONTRADICTED, build_dataset, contradictions

    found = contradictions(load_all_rows())
    assert set(found) == {
        "mbridge_25.09_DGX-H100_Qwen3_30B_a3B__tokendrop__16gpu_FP8unspecified",
        "mbridge_25.11_DGX-H100_Qwen3_30B_a3B_16gpu_FP8-CS",
        # FP8 current scaling (25.09) and MXFP8 (25.11) are one number format: 1.94x apart.
        "mbridge_25.09_DGX-B200_Qwen3_30B_a3B__tokendrop__8gpu_FP8unspecified",
        "mbridge_25.11_DGX-B200_Qwen3_30B_a3B_8gpu_FP8-MX",
    }
    # The same two releases and recipes on GB200 agree within 5 %: not flagged.
    assert not any("GB200" in k for k in found)
    assert all(v.startswith(CONTRADICTED) for v in found.values())
    # The rule, not the ids: halve one Llama row's throughput and its pair is flagged.
    rows = [dict(r) for r in ROWS]
    i = next(
        k for k, r in enumerate(rows) if r["id"] == "mbridge_25.11_DGX-B200_LLAMA3_8B_8gpu_FP8-CS"
    )
    rows[i] = {
        **rows[i],
        "measured": {"tokens_per_s_per_gpu": 0.5 * rows[i]["measured"]["tokens_per_s_per_gpu"]},
    }
    assert "mbridge_25.09_DGX-B200_LLAMA3_8B_8gpu_FP8unspecified" in contradictions(rows)
    pts = build_dataset(ROWS[:0] + [r for r in ROWS if r["id"] in found])["points"]
    assert {p["group"] for p in pts} == {"Bridge contradicted (not fitted)"}


def test_later_releases_borrow_the_newest_recipe():
    from codesign.calibration._bridge import recipe_facts

    # a release whose recipes were not collected borrows the newest fitted one
    facts, used = recipe_facts(("qwen3_30b_a3b", "b300", "26.10", "main"))
    assert used == ("qwen3_30b_a3b", "b200", "25.11", "main")
    assert facts == BRIDGE_RECIPES[used]
    # a page-row correction (micro-batch) stays with its row
    facts, used = recipe_facts(("gpt_oss_120b", "h100", "26.10", "main"))
    assert used == ("gpt_oss_120b", "h100", "25.11", "main")
    assert "microbatch" in BRIDGE_RECIPES[used] and "microbatch" not in facts
    assert facts["recompute_modules"] == BRIDGE_RECIPES[used]["recompute_modules"]
    key = ("llama3_8b", "gb200", "25.09", "alt")
    assert recipe_facts(key) == (BRIDGE_RECIPES[key], key)
    assert recipe_facts(("kimi_k2", "gb300", "26.02", "main"))[0] is None


def test_2026_recipes_are_read_per_release():
    """The external rows' releases have their own recipe facts, each naming its release."""
    from codesign.calibration._bridge import recipe_facts
    from codesign.calibration._bridge_recipes26 import BRIDGE_RECIPES_26, RELEASES_26

    assert not set(BRIDGE_RECIPES_26) & set(BRIDGE_RECIPES)
    for key, facts in BRIDGE_RECIPES_26.items():
        tag, sha = RELEASES_26[key[2]]
        assert recipe_facts(key) == (facts, key)
        for name, fact in facts.items():
            assert f"{tag}@{sha}" in fact["source"], (key, name)
    # settings that changed after the fitted releases
    ds = BRIDGE_RECIPES_26[("deepseek_v3", "b200", "26.04.01", "main")]
    assert ds["moe_hierarchical_dispatch"]["value"] and ds["overlap_moe_comm"]["value"]
    assert not BRIDGE_RECIPES[("deepseek_v3", "b200", "25.11", "main")]["overlap_moe_comm"]["value"]
    assert (
        BRIDGE_RECIPES_26[("deepseek_v3", "gb300", "26.06", "main")]["recompute"]["value"] == "none"
    )


def test_2026_recipe_facts_per_precision():
    """One system's Llama rows ran different configs per precision: FSDP with CPU offload in
    FP8 (fp8_cs), pipeline parallel without offload in MXFP8."""
    from pathlib import Path

    path = (
        Path(__file__).resolve().parents[1] / "experiments/data/megatron_bridge_2026_external.json"
    )
    by_id = {r["id"]: r for r in load_rows(path)}
    doc, notes = row_to_doc(by_id["mbridge_26.04_DGX-GB300_LLAMA3_70B_64gpu_FP8"])
    assert doc["strategy"]["zero"] == 3
    assert doc["strategy"]["offload_activations"] == pytest.approx(20 / 80)
    assert doc["strategy"]["offload_whole_layers"] is True  # cpu_offloading_num_layers
    assert any(n.startswith("recipe facts for FP8") for n in notes)
    doc, _ = row_to_doc(by_id["mbridge_26.04_DGX-GB300_LLAMA3_70B_64gpu_MXFP8"])
    assert doc["strategy"]["zero"] == 1 and doc["strategy"]["offload_activations"] == 0.0
    # 26.02 on: module-level offloading exists, so the row's alternatives may use it.
    assert doc["strategy"]["offload_whole_layers"] is False
    doc, _ = row_to_doc(by_id["mbridge_26.04_DGX-GB300_LLAMA3_70B_64gpu_NVFP4"])
    assert doc["strategy"]["overlap_tp"] is False


def test_external_test_set_rows_load():
    """The later releases (experiments/data, never fitted) map and load like fitted rows."""
    from pathlib import Path

    path = (
        Path(__file__).resolve().parents[1] / "experiments/data/megatron_bridge_2026_external.json"
    )
    rows = load_rows(path)
    assert len(rows) >= 150
    assert {r["id"].split("_")[1] for r in rows} >= {"26.02", "26.04", "26.06"}
    for row in rows:
        assert source_short(row) == "Bridge"
        doc, notes = row_to_doc(row)
        cfg = load_run_dict(doc)
        assert int(cfg.strategy.ep) == (row["parallel"]["ep"] or 1)
        assert not any(n.startswith("recipe facts of") for n in notes), notes  # none borrowed
        t, _ = measured_step_time(row)
        assert t > 0


def test_same_layout_groups_join_releases_of_one_layout():
    """One layout measured in several releases forms one group (releases sorted, step times as
    measured); a layout seen in one release only forms none; the exact number format keeps an
    FP8 current-scaling row apart from an MXFP8 row of the same layout."""
    from pathlib import Path

    from codesign.calibration import same_layout_groups

    ext = load_rows(
        Path(__file__).resolve().parents[1] / "experiments/data/megatron_bridge_2026_external.json"
    )
    rows = load_rows(BRIDGE_DATA_PATH) + ext
    by_id = {r["id"]: r for r in rows}
    groups = same_layout_groups(rows)
    for members in groups:
        assert len({rel for _, rel, _ in members}) > 1
        assert [rel for _, rel, _ in members] == sorted(rel for _, rel, _ in members)
        for row_id, rel, t in members:
            assert row_id.split("_")[1] == rel
            assert t == pytest.approx(measured_step_time(by_id[row_id])[0])
    oss = "DGX-GB300_GPT_OSS_120B_64gpu_MXFP8"
    (group,) = [g for g in groups if any(i.endswith(oss) for i, _, _ in g)]
    assert [rel for _, rel, _ in group] == ["26.06", "26.06.01", "26.08"]
    # 26.06.01's attention-sink regression: 2.47 s -> 4.04 s on the same layout.
    assert group[1][2] / group[0][2] > 1.5
    grouped = {i for g in groups for i, _, _ in g}
    assert "mbridge_25.11_DGX-GB300_GPT_OSS_120B_64gpu_BF16" not in grouped  # one release only
    cs, mx = (
        "mbridge_25.11_DGX-B200_LLAMA3_8B_8gpu_FP8-CS",
        "mbridge_25.11_DGX-B200_LLAMA3_8B_8gpu_FP8-MX_alt",
    )
    together = [g for g in groups if {cs, mx} <= {i for i, _, _ in g}]
    apart = [
        g
        for g in same_layout_groups(rows, exact_precision=True)
        if {cs, mx} <= {i for i, _, _ in g}
    ]
    assert len(together) == 1 and not apart


def test_same_layout_systems_join_systems_of_one_release_and_layout():
    """One layout run in one release on several systems forms one group (systems sorted, step
    times as measured, everything but the system equal); the external releases' pairs give the
    speed-ups of ``external_bridge.system_speedups``: measured ratios as the rows give them, and
    a model that predicts every row exactly reproduces them."""
    from pathlib import Path

    from conftest import experiment_module

    from codesign.calibration import same_layout_systems
    from codesign.calibration._dataset import _layout_key

    ext = load_rows(
        Path(__file__).resolve().parents[1] / "experiments/data/megatron_bridge_2026_external.json"
    )
    by_id = {r["id"]: r for r in load_rows(BRIDGE_DATA_PATH) + ext}
    groups = same_layout_systems(list(by_id.values()))
    assert groups
    for members in groups:
        assert len({s for _, s, _ in members}) > 1
        assert [s for _, s, _ in members] == sorted(s for _, s, _ in members)
        assert len({i.split("_")[1] for i, _, _ in members}) == 1  # one release
        keys = {_layout_key(by_id[i], True)[1:] for i, _, _ in members}
        assert len(keys) == 1
        for row_id, system, t in members:
            assert _layout_key(by_id[row_id], True)[0] == system
            assert t == pytest.approx(measured_step_time(by_id[row_id])[0])
    eb = experiment_module("external_bridge")
    recs = [
        {
            "id": r["id"],
            "system": r["id"].split("_")[2].removeprefix("DGX-"),
            "measured_s": measured_step_time(r)[0],
            "predicted_s": 2.0 * measured_step_time(r)[0],
            "peak_tflops": 5000.0 if "GB" in r["id"] else 4500.0,
        }
        for r in ext
    ]
    pairs = {(d["a"], d["b"]): d for d in eb.system_speedups(ext, recs)}
    gb = pairs[("GB200", "GB300")]
    assert gb["layouts"] == len(gb["measured"]) > 0
    assert gb["model"] == pytest.approx(gb["measured"]) and set(gb["peak"]) == {1.0}
    assert pairs[("B200", "GB200")]["peak"] == pytest.approx(
        [5000.0 / 4500.0] * pairs[("B200", "GB200")]["layouts"]
    )
    assert sum(d["layouts"] for d in pairs.values()) == sum(
        len(g) * (len(g) - 1) // 2 for g in same_layout_systems(ext)
    )
