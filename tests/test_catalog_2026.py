"""The 2026 hardware catalog (issue 11, item 4): new accelerators and fabrics, FP4 peaks, host
links, their provenance, their efficiency presets and ``codesign presets accelerators``."""

from __future__ import annotations

import json
import math

import pytest

import codesign as cd
from codesign.calibration._grouping import GENERATION, NEAREST_GENERATION
from codesign.cli import main
from codesign.config import accelerator_preset, catalog, data_dir, system_preset, tier_preset

NEW_ACCELERATORS = (
    "b300",
    "gb300",
    "mi355x",
    "tpu-v6e",
    "tpu-v7",
    "trainium2",
    "trainium3",
    "rubin",
)
NEW_FABRICS = (
    "cx8-800",
    "nvlink6",
    "infinity-fabric-mi355x",
    "ici-v6e",
    "dcn-tpu-v6e",
    "ici-v7",
    "dcn-tpu-v7",
    "neuronlink-v3",
    "neuronlink-v4",
    "efa-200",
    "cx9-1600",
)
EQUAL_RATE = {
    "tpu-v5p": ("peak_tflops", "peak_tflops_fp8"),
    "tpu-v6e": ("peak_tflops", "peak_tflops_fp8"),
    "trainium3": ("peak_tflops_fp8", "peak_tflops_fp4"),
}
"""Documented equal rates: Google's TPU docs list v5p/v6e FP8 at the BF16 rate (accepted, no
speedup); AWS gives one MXFP8/MXFP4 figure for Trainium3."""


def _doc(accel, precision="bf16", n=16, tp=2, dp=8):
    return {
        "model": {"preset": "llama3-8b"},
        "training": {"global_batch": 64, "precision": precision},
        "system": {"accelerator": accel, "num_accelerators": n},
        "strategy": {"tp": tp, "pp": 1, "dp": dp},
    }


# ---- provenance ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["accelerators", "fabrics"])
def test_every_preset_has_a_source(kind):
    for name, t in catalog()[kind].items():
        assert isinstance(t.get("source"), str) and len(t["source"].strip()) > 40, name
        assert t.get("name"), name


def test_new_parts_are_in_the_catalog():
    cat = catalog()
    assert set(NEW_ACCELERATORS) <= set(cat["accelerators"])
    assert set(NEW_FABRICS) <= set(cat["fabrics"])
    assert "ib-xdr-800" in cat["fabrics"]  # kept next to the Ethernet cx8-800


def test_prices_and_unpublished_numbers_are_marked_estimates():
    for name in NEW_ACCELERATORS:
        src = catalog()["accelerators"][name]["source"]
        assert "estimate" in src, name
    for name in NEW_FABRICS:
        assert "estimate" in catalog()["fabrics"][name]["source"], name


def test_announced_parts_say_so():
    cat = catalog()
    for name, t in [("rubin", cat["accelerators"]["rubin"])] + [
        (f, cat["fabrics"][f]) for f in ("nvlink6", "cx9-1600")
    ]:
        assert "ANNOUNCED" in t["name"] and "ANNOUNCED" in t["source"], name


# ---- the numbers ----------------------------------------------------------------------------


def test_peaks_increase_with_lower_precision():
    """FP4 > FP8 > BF16 dense peaks where nonzero (equal only where the vendor documents it)."""
    for name, t in catalog()["accelerators"].items():
        a = accelerator_preset(name)
        chain = [
            (k, getattr(a, k))
            for k in ("peak_tflops", "peak_tflops_fp8", "peak_tflops_fp4")
            if getattr(a, k) > 0
        ]
        assert chain[0][0] == "peak_tflops", name
        for (k0, v0), (k1, v1) in zip(chain, chain[1:], strict=False):
            if EQUAL_RATE.get(name) == (k0, k1):
                assert v1 == v0, (name, k0, k1)
            else:
                assert v1 > v0, (name, k0, v0, k1, v1)
        assert set(t) >= {"peak_tflops_fp8", "peak_tflops_fp4", "host_link_gbps"}, name


def test_fp4_only_where_the_hardware_has_it():
    cat = catalog()["accelerators"]
    for name in ("a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb"):
        assert cat[name]["peak_tflops_fp4"] == 0.0
    for name in ("mi300x", "tpu-v5p", "tpu-v6e", "tpu-v7", "trainium2"):
        assert cat[name]["peak_tflops_fp4"] == 0.0
    for name in ("b200", "gb200", "b300", "gb300", "mi355x", "trainium3", "rubin"):
        assert cat[name]["peak_tflops_fp4"] > 0
    # Blackwell Ultra raises dense FP4 over Blackwell, not BF16/FP8
    assert cat["b300"]["peak_tflops_fp4"] > cat["b200"]["peak_tflops_fp4"]
    assert cat["gb300"]["peak_tflops_fp4"] > cat["gb200"]["peak_tflops_fp4"]
    assert cat["b300"]["peak_tflops"] == cat["b200"]["peak_tflops"]


def test_host_links():
    cat = catalog()["accelerators"]
    assert all(t["host_link_gbps"] > 0 for t in cat.values())
    assert cat["a100-sxm4-80gb"]["host_link_gbps"] == 32.0  # PCIe Gen4 x16
    for name in ("h100-sxm5-80gb", "h200-sxm-141gb", "b200", "b300"):
        assert cat[name]["host_link_gbps"] == 64.0  # PCIe Gen5 x16
    for name in ("gb200", "gb300", "rubin"):  # NVLink-C2C beats PCIe
        assert cat[name]["host_link_gbps"] > 64.0
        assert "C2C" in cat[name]["source"]


def test_accelerators_follow_hardware_specs_json():
    specs = {
        s["id"]: s for s in json.loads((data_dir() / "hardware_specs.json").read_text())["specs"]
    }
    pairs = {
        "A100-SXM4-80GB": "a100-sxm4-80gb",
        "H100-SXM5-80GB": "h100-sxm5-80gb",
        "MI355X": "mi355x",
        "TPU v6e (Trillium)": "tpu-v6e",
        "Trainium2": "trainium2",
        "B200 (HGX/DGX B200)": "b200",
    }
    cat = catalog()["accelerators"]
    for sid, name in pairs.items():
        s, t = specs[sid], cat[name]
        assert t["peak_tflops"] == s["peak_dense_bf16_tflops"], name
        if s.get("peak_dense_fp8_tflops"):
            assert t["peak_tflops_fp8"] == s["peak_dense_fp8_tflops"], name
        if isinstance(s.get("peak_dense_fp4_tflops"), int | float):
            assert t["peak_tflops_fp4"] == s["peak_dense_fp4_tflops"], name
        assert t["hbm_gb"] == s["hbm_gb"] and t["hbm_tbps"] == s["hbm_tb_s"], name
    bu = specs["B300 / GB300 (Blackwell Ultra)"]
    for name in ("b300", "gb300"):
        assert cat[name]["hbm_gb"] == bu["hbm_gb"] and cat[name]["hbm_tbps"] == bu["hbm_tb_s"]


def test_fabrics_are_consistent_with_the_accelerators():
    cat = catalog()
    for name, a in cat["accelerators"].items():
        up, out = cat["fabrics"][a["scale_up"]], cat["fabrics"][a["scale_out"]]
        assert up["kind"] == "scale-up" and out["kind"] == "scale-out", name
        assert out["domain"] == 0.0, name  # reaches the whole cluster
        assert up["bandwidth_gbps"] > out["bandwidth_gbps"], name
    f = cat["fabrics"]
    assert f["cx8-800"]["bandwidth_gbps"] == 100.0  # 800 Gb/s per GPU
    assert f["nvlink6"]["bandwidth_gbps"] == 2 * f["nvlink5-nvl72"]["bandwidth_gbps"]
    assert f["ici-v6e"]["domain"] == 256.0 and f["ici-v7"]["domain"] == 9216.0
    assert f["neuronlink-v3"]["domain"] == 64.0
    assert cat["accelerators"]["gb300"]["scale_up"] == "nvlink5-nvl72"
    assert "GB300" in f["nvlink5-nvl72"]["name"]


# ---- loading and evaluating ---------------------------------------------------------------


@pytest.mark.parametrize("name", NEW_ACCELERATORS)
def test_new_parts_load_and_evaluate(name):
    a = accelerator_preset(name)
    assert a.peak_tflops > 0 and a.host_link_gbps > 0
    sy = system_preset(name, 144)
    t = catalog()["accelerators"][name]
    assert [float(x.domain) for x in sy.tiers] == [t["scale_up_domain"], 144.0]
    assert tier_preset(t["scale_out"], 144).domain == 144.0
    for precision in ("bf16", "fp8"):
        cfg = cd.load_run_dict(_doc(name, precision))
        assert cfg.names["accelerator"] == name
        assert cfg.names["efficiency"].startswith(name)  # its calibrated (inherited) preset
        step = float(cd.evaluate(*cfg.specs()).step_time_s)
        assert math.isfinite(step) and step > 0


def test_new_parts_have_an_inherited_efficiency_preset():
    cat = catalog()
    dates = {cat["efficiency"][a]["date"] for a in cat["accelerators"]}
    assert len(dates) == 1
    measured = set(GENERATION)
    for name in NEW_ACCELERATORS:
        t = cat["efficiency"][name]
        if name in measured:  # GB300 has Megatron-Bridge rows of its own
            assert t["calibrated_generation"] == GENERATION[name]
            continue
        gen, why = NEAREST_GENERATION[name]
        assert t["note"].startswith(f"No measured rows for {name}: inherits the {gen.upper()}")
        assert why in t["note"]
        assert t["calibrated_generation"] == gen
        te = t["calibrated_tier_efficiency"]
        a = cat["accelerators"][name]
        assert a["scale_up"] in te and a["scale_out"] in te


def test_faster_parts_give_shorter_steps():
    def step(name):
        cfg = cd.load_run_dict(_doc(name))
        return float(cd.evaluate(*cfg.specs()).step_time_s)

    assert step("gb300") < step("h100-sxm5-80gb")
    assert step("tpu-v7") < step("tpu-v6e")
    assert step("trainium3") <= step("trainium2") * 1.01


@pytest.mark.parametrize("name", ["h100-sxm5-80gb", "mi300x", "tpu-v7", "trainium2"])
def test_fp4_run_on_an_accelerator_without_fp4_is_rejected(name):
    with pytest.raises(cd.SpecError) as e:
        cd.load_run_dict(_doc(name, "fp4"))
    assert "precision" in str(e.value)


@pytest.mark.parametrize("name", ["b300", "gb300", "rubin"])
def test_fp4_run_on_blackwell_ultra_and_rubin_evaluates(name):
    half = cd.load_run_dict(_doc(name, "bf16"))
    fp4 = cd.load_run_dict(_doc(name, "nvfp4"))
    t_half = float(cd.evaluate(*half.specs()).step_time_s)
    t_fp4 = float(cd.evaluate(*fp4.specs()).step_time_s)
    assert math.isfinite(t_fp4) and 0 < t_fp4 < t_half


# ---- command line ---------------------------------------------------------------------------


def test_presets_accelerators_lists_new_parts_with_figures(capsys):
    assert main(["presets", "accelerators"]) == 0
    out = capsys.readouterr().out
    for name in NEW_ACCELERATORS:
        assert f"  {name} " in out
    assert "2,500/5,000/15,000 TFLOP/s dense" in out  # gb300
    assert "HBM 192 GB at 7.38 TB/s" in out  # tpu-v7
    src = catalog()["accelerators"]["rubin"]["source"]
    assert src[:60] in out and src[-60:] not in out.replace("\n", " ")
    assert main(["presets", "accelerators", "--sources"]) == 0
    full = " ".join(capsys.readouterr().out.split())
    assert " ".join(src.split()) in full.replace("source: ", "")


def test_presets_json_is_unchanged(capsys):
    assert main(["presets", "accelerators", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d == {"accelerators": catalog()["accelerators"]}
