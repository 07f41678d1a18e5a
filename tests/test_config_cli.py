"""The command line and the config loader: output formats and one-line errors on bad input."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import jax
import numpy as np
import pytest
from conftest import EXAMPLE_TOML, REPO, small_doc

import codesign as cd
from codesign.cli import main

GOOD = """
[model]
preset = "llama3-8b"

[training]
global_batch = 512
{tokens}

[system]
accelerator = "h100-sxm5-80gb"
num_accelerators = 64

[[system.tiers]]
preset = "nvlink4"
domain = 8

[[system.tiers]]
preset = "ib-ndr-400"
domain = {outer_domain}
bandwidth_gbps = {bw}

[strategy]
tp = {tp}
pp = 2
dp = {dp}
"""


def write(tmp_path, text, name="run.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def good(tokens="", outer_domain=64, bw=50.0, tp=2, dp=16):
    return GOOD.format(tokens=tokens, outer_domain=outer_domain, bw=bw, tp=tp, dp=dp)


# ---- successful runs -------------------------------------------------------------------


def test_evaluate_example_prints_table(capsys):
    assert main(["evaluate", str(EXAMPLE_TOML)]) == 0
    out = capsys.readouterr().out
    for needle in (
        "step time",
        "forward",
        "memory/accelerator",
        "fits",
        "capex",
        "to train",
        "tp=8 pp=8 dp=16",
    ):
        assert needle in out, needle


def test_evaluate_json_keys_and_values(capsys):
    assert main(["evaluate", str(EXAMPLE_TOML), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for k in ("step_time_s", "breakdown_s", "memory_gb", "fits", "mfu", "tokens_per_s", "cost"):
        assert k in d, k
    assert set(d["breakdown_s"]) == set(cd.BREAKDOWN_KEYS)
    assert {"weights", "gradients", "optimizer", "activations", "buffers", "total"} <= set(
        d["memory_gb"]
    )
    assert {"capex_usd", "usd_per_hour", "usd_per_step", "energy_kwh_per_step"} <= set(d["cost"])
    assert d["fits"] is True
    # training.tokens = 3e11 is given in the example.
    assert "time_to_train_days" in d and "cost_to_train_usd" in d
    # The numbers are the library's.
    cfg = cd.load_run(EXAMPLE_TOML)
    r = cd.evaluate(*cfg.specs())
    assert math.isclose(d["step_time_s"], float(r.step_time_s), rel_tol=1e-12)
    assert math.isclose(sum(d["breakdown_s"].values()), d["step_time_s"], rel_tol=1e-12)
    assert math.isclose(d["memory_gb"]["total"], float(r.memory_gb["total"]), rel_tol=1e-12)
    assert math.isclose(d["cost"]["capex_usd"], float(r.cost["capex_usd"]), rel_tol=1e-12)
    assert math.isclose(d["time_to_train_days"], float(r.cost["time_to_train_days"]), rel_tol=1e-12)
    assert math.isclose(d["tokens_per_s"], 1536 * 2048 / d["step_time_s"], rel_tol=1e-12)


def test_json_without_tokens_has_no_time_to_train(tmp_path, capsys):
    p = write(tmp_path, good())
    assert main(["evaluate", str(p), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert "time_to_train_days" not in d
    assert "cost_to_train_usd" not in d
    assert set(d["breakdown_s"]) == set(cd.BREAKDOWN_KEYS)


def test_json_with_tokens(tmp_path, capsys):
    p = write(tmp_path, good(tokens="tokens = 1.5e13"))
    assert main(["evaluate", str(p), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    g = d["goodput"]["goodput"]  # on by default: the platform's reliability preset
    assert 0.5 < g < 1.0
    steps = 1.5e13 / (512 * 8192) / g
    assert math.isclose(d["time_to_train_days"], steps * d["step_time_s"] / 86400, rel_tol=1e-12)
    assert math.isclose(d["cost_to_train_usd"], steps * d["cost"]["usd_per_step"], rel_tol=1e-12)


def test_config_that_does_not_fit_is_not_an_error(tmp_path, capsys):
    text = """
[model]
preset = "gpt3-175b"
[training]
global_batch = 64
[system]
accelerator = "a100-sxm4-40gb"
num_accelerators = 64
[strategy]
tp = 8
pp = 8
dp = 1
recompute = "none"
zero = 0
"""
    p = write(tmp_path, text)
    assert main(["evaluate", str(p), "--json"]) == 0
    captured = capsys.readouterr()
    d = json.loads(captured.out)
    assert d["fits"] is False
    assert d["memory_gb"]["total"] > 40.0
    assert all(math.isfinite(v) for v in d["breakdown_s"].values())
    assert main(["evaluate", str(p)]) == 0
    assert "DOES NOT FIT" in capsys.readouterr().out


def test_load_run_dict_preset_overrides():
    cfg = cd.load_run_dict(
        {
            "model": {"preset": "llama3-8b", "seq_len": 4096},
            "training": {"global_batch": 64},
            "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 16, "hbm_gb": 96},
            "strategy": {"tp": 8, "pp": 1, "dp": 2},
        }
    )
    assert float(cfg.model.seq_len) == 4096.0 and float(cfg.model.hidden) == 4096.0
    assert float(cfg.system.accelerator.hbm_gb) == 96.0
    # Default tiers from the accelerator preset: nvlink4 x 8, then ib-ndr-400 over the cluster.
    assert [float(t.domain) for t in cfg.system.tiers] == [8.0, 16.0]
    assert [float(t.bandwidth_gbps) for t in cfg.system.tiers] == [450.0, 50.0]


# ---- bad input: exit 2, one line on stderr naming the field, no traceback ------------

BAD = {
    "negative_bandwidth": (good(bw=-50.0), "bandwidth_gbps"),
    "tp_not_dividing_heads": (
        good(tp=3, dp=32)
        .replace("pp = 2", "pp = 1")
        .replace("num_accelerators = 64", "num_accelerators = 96")
        .replace("domain = 64", "domain = 96"),
        "strategy.tp",
    ),
    "degrees_product": (good(dp=8), "tp*pp*dp*cp"),
    "unknown_preset": (
        good().replace('preset = "llama3-8b"', 'preset = "gpt-5-turbo"'),
        "model.preset",
    ),
    "missing_tier": (good(outer_domain=32), "system.tiers"),
    "malformed_toml": (good().replace("[model]", "[model"), "TOML"),
    "unknown_key": (
        good().replace("dp = 16", "dp = 16\ndata_parallel = 4"),
        "strategy.data_parallel",
    ),
    "bad_recompute": (
        good().replace("dp = 16", 'dp = 16\nrecompute = "some"'),
        "strategy.recompute",
    ),
    "string_number": (
        good().replace("global_batch = 512", 'global_batch = "512"'),
        "training.global_batch",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_exit_2_one_line(case, tmp_path, capsys):
    text, field = BAD[case]
    p = write(tmp_path, text)
    rc = main(["evaluate", str(p)])
    captured = capsys.readouterr()
    assert rc == 2
    err = captured.err.strip()
    assert err, "no error message"
    assert "\n" not in err, err
    assert "Traceback" not in err
    assert field in err, err
    assert err.startswith("codesign: error:")
    assert captured.out == ""


def test_bad_input_tp_message_names_heads(tmp_path, capsys):
    text, _ = BAD["tp_not_dividing_heads"]
    assert main(["evaluate", str(write(tmp_path, text))]) == 2
    assert "model.heads" in capsys.readouterr().err


def test_missing_file(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path / "nope.toml")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and "nope.toml" in err


def test_bad_input_as_subprocess(tmp_path):
    p = write(tmp_path, BAD["negative_bandwidth"][0])
    proc = subprocess.run(
        [sys.executable, "-m", "codesign.cli", "evaluate", str(p)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("codesign: error:")]
    assert len(errors) == 1 and "bandwidth_gbps" in errors[0]
    assert proc.stdout == ""


def test_console_script_entry_point_one_line(tmp_path):
    """What the ``codesign`` console script runs (``codesign.cli:main``): exactly one line."""
    p = write(tmp_path, BAD["missing_tier"][0])
    code = "import sys; from codesign.cli import main; sys.exit(main())"
    proc = subprocess.run(
        [sys.executable, "-c", code, "evaluate", str(p)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("codesign: error: system.tiers")


# ---- more bad input: every invalid number is a one-line error, never a traceback -------
# (TOML allows the literals nan and inf.)

BAD_MORE = {
    "global_batch_nan": (
        good().replace("global_batch = 512", "global_batch = nan"),
        "training.global_batch",
    ),
    "global_batch_inf": (
        good().replace("global_batch = 512", "global_batch = inf"),
        "training.global_batch",
    ),
    "tier_name_not_string": (
        good().replace('preset = "nvlink4"', 'preset = "nvlink4"\nname = 5'),
        "system.tiers[0].name",
    ),
    "grad_reduce_bytes_negative": (
        good().replace("global_batch = 512", "global_batch = 512\ngrad_reduce_bytes = -4"),
        "training.grad_reduce_bytes",
    ),
    "optimizer_state_bytes_negative": (
        good().replace("global_batch = 512", "global_batch = 512\noptimizer_state_bytes = -8"),
        "training.optimizer_state_bytes",
    ),
    "fp8_attention_above_one": (
        good().replace("global_batch = 512", "global_batch = 512\nfp8_attention = 1.5"),
        "training.fp8_attention = 1.5 is invalid: a fraction in [0, 1]",
    ),
    "fp8_attention_in_bf16": (
        good().replace("global_batch = 512", "global_batch = 512\nfp8_attention = 1"),
        "training.fp8_attention",
    ),
    "efficiency_gemm_max_zero": (good() + "\n[efficiency]\ngemm_max = 0\n", "efficiency.gemm_max"),
    "efficiency_hbm_eff_nan": (good() + "\n[efficiency]\nhbm_eff = nan\n", "efficiency.hbm_eff"),
    "efficiency_overlap_above_one": (
        good() + "\n[efficiency]\ndp_overlap_eff = 2.0\n",
        "efficiency.dp_overlap_eff",
    ),
    "efficiency_dp_overlap_slowdown_negative": (
        good() + "\n[efficiency]\ndp_overlap_slowdown = -0.1\n",
        "efficiency.dp_overlap_slowdown",
    ),
    "efficiency_dp_comm_eff_zero": (
        good() + "\n[efficiency]\ndp_comm_eff = 0\n",
        "efficiency.dp_comm_eff",
    ),
    "efficiency_flex_ratio_above_one": (
        good() + "\n[efficiency]\nmoe_permute_flex_ratio = 1.5\n",
        "efficiency.moe_permute_flex_ratio = 1.5 is invalid: a ratio in (0, 1]",
    ),
    "efficiency_flex_ratio_zero": (
        good() + "\n[efficiency]\nep_overlap_flex_ratio = 0\n",
        "efficiency.ep_overlap_flex_ratio",
    ),
    "derived_dp_not_whole": (
        good().replace("dp = 16\n", "").replace("tp = 2", "tp = 3"),
        "strategy.dp = '64 / (tp 3 x pp 2 x cp 1)' is invalid: a whole number",
    ),
}


@pytest.mark.parametrize("case", list(BAD_MORE))
def test_more_bad_input_exit_2_one_line(case, tmp_path, capsys):
    text, field = BAD_MORE[case]
    p = write(tmp_path, text)
    try:
        rc = main(["evaluate", str(p)])
    except Exception as e:  # a traceback is a failure of the contract, not of the test
        pytest.fail(f"main() raised {type(e).__name__}: {e}")
    captured = capsys.readouterr()
    assert rc == 2, captured.out[:200]
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert field in err, err


# ---- physically invalid input (errors) and implausible input (warnings) ----------------

BAD_PHYSICAL = {
    "scale_up_domain_not_tiling_the_cluster": (
        good().replace("domain = 8", "domain = 12"),
        "system.tiers[0].domain",
    ),
    "hidden_not_multiple_of_heads": (
        good().replace('preset = "llama3-8b"', 'preset = "llama3-8b"\nhidden = 4097'),
        "model.hidden",
    ),
    "pue_below_one": (
        good().replace("num_accelerators = 64", "num_accelerators = 64\npue = 0.5"),
        "system.pue",
    ),
    "boolean_degree": (good().replace("tp = 2", "tp = true"), "strategy.tp"),
}


@pytest.mark.parametrize("case", list(BAD_PHYSICAL))
def test_physically_invalid_input_exit_2_one_line(case, tmp_path, capsys):
    text, field = BAD_PHYSICAL[case]
    rc = main(["evaluate", str(write(tmp_path, text))])
    captured = capsys.readouterr()
    assert rc == 2, captured.out[:200]
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith(f"codesign: error: {field} ="), err


@pytest.mark.parametrize("bw", [1e300, 1e-9])
def test_implausible_bandwidth_is_one_warning_line(bw, tmp_path, capsys):
    rc = main(["evaluate", str(write(tmp_path, good(bw=bw)))])
    captured = capsys.readouterr()
    assert rc == 0
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("codesign: warning: system.tiers[1].bandwidth_gbps"), lines
    assert "plausible range" in lines[0]
    assert "step time" in captured.out


@pytest.mark.parametrize("kind", ["directory", "binary"])
def test_run_file_that_is_no_toml_text(kind, tmp_path, capsys):
    if kind == "directory":
        path = tmp_path
    else:
        path = tmp_path / "run.toml"
        path.write_bytes(bytes(range(256)))
    for cmd in ("evaluate", "sweep", "optimize"):
        rc = main([cmd, str(path)])
        err = capsys.readouterr().err.strip()
        assert rc == 2, (cmd, err)
        assert "\n" not in err and "Traceback" not in err, err
        assert str(path) in err and ("directory" in err if kind == "directory" else "binary" in err)


@pytest.mark.parametrize(
    "args,name",
    [
        (["optimize", "P", "--starts", "0"], "--starts"),
        (["optimize", "P", "--steps", "-5"], "--steps"),
        (["sweep", "P", "--top-k", "-3"], "--top-k"),
        (["sweep", "P", "--top-k", "0"], "--top-k"),
        (["sweep", "P", "--top-k", "two"], "--top-k"),
    ],
)
def test_bad_arguments_exit_2_one_line(args, name, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert name in err and "positive integer" in err, err


def test_huge_grid_axis_is_an_error(tmp_path, capsys):
    text = (
        good()
        + "\n[search]\n[[search.tiers]]\nindex = 1\nbandwidth_gbps = {min = 1, max = 1000, num = 1000000000}\n"
    )
    rc = main(["sweep", str(write(tmp_path, text))])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err, err
    assert "search.tiers[1].bandwidth_gbps.num" in err and "100,000" in err, err


@pytest.mark.parametrize(
    "env,field",
    [
        ({}, "--distributed"),
        (
            {"CODESIGN_COORDINATOR": "127.0.0.1:1", "CODESIGN_NUM_PROCESSES": "two"},
            "CODESIGN_NUM_PROCESSES",
        ),
        (
            {"CODESIGN_COORDINATOR": "127.0.0.1:1", "CODESIGN_PROCESS_ID": "3"},
            "CODESIGN_PROCESS_ID",
        ),
    ],
)
def test_distributed_without_a_cluster_is_one_line(env, field):
    problem = REPO / "experiments" / "problems" / "llama3-8b-64xh100-step.toml"
    clean = {k: v for k, v in __import__("os").environ.items() if not k.startswith("CODESIGN_")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "codesign.cli",
            "sweep",
            str(problem),
            "--distributed",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**clean, **env},
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert proc.stderr.startswith(f"codesign: error: {field}"), proc.stderr


def test_strategy_degrees_default_as_megatron_derives_them():
    """``tp`` and ``pp`` default to 1 and ``dp`` to ``num_accelerators / (tp pp cp)``
    (Megatron-Core's ``data_parallel_size``); a given ``dp`` is still checked, not replaced."""
    doc = small_doc(cp=2)
    del doc["strategy"]["dp"]
    derived = cd.load_run_dict(doc)
    assert float(derived.strategy.dp) == 64 / (2 * 2 * 2)
    given = cd.load_run_dict(small_doc(cp=2, dp=8))
    assert cd.evaluate(*derived.specs()).step_time_s == cd.evaluate(*given.specs()).step_time_s
    bare = small_doc()
    bare["strategy"] = {}
    st = cd.load_run_dict(bare).strategy
    assert (float(st.tp), float(st.pp), float(st.dp)) == (1.0, 1.0, 64.0)
    with pytest.raises(cd.SpecError, match="strategy.tp\\*pp\\*dp\\*cp"):
        cd.load_run_dict(small_doc(dp=8))
    bare["strategy"] = {"tp": 0}
    with pytest.raises(cd.SpecError, match="strategy.tp = 0"):
        cd.load_run_dict(bare)


def test_system_tier_shorthand_replaces_the_presets_default_tiers():
    """``system.scale_up_domain`` (and ``scale_up``, ``scale_out``) replace the accelerator
    preset's default tiers: 256 GB300 use 64 GPUs of each NVL72 rack, as the explicit tiers
    do; the error for 72 suggests it; with ``[[system.tiers]]`` the shorthand is an error."""

    def doc(**system):
        d = small_doc(tp=1, pp=1, dp=256)
        d["system"] = {"accelerator": "gb300", "num_accelerators": 256, **system}
        return d

    with pytest.raises(cd.SpecError, match="system.scale_up_domain = 64 or that tier's domain"):
        cd.load_run_dict(doc())
    short = cd.load_run_dict(doc(scale_up_domain=64, scale_out="ib-ndr-400"))
    tiers = [
        {"preset": "nvlink5-nvl72", "domain": 64},
        {"preset": "ib-ndr-400", "domain": 256},
    ]
    explicit = cd.load_run_dict(doc(tiers=tiers))
    for x, y in zip(*(jax.tree.leaves(c.system) for c in (short, explicit)), strict=True):
        np.testing.assert_array_equal(x, y)
    assert short.names["tiers"] == explicit.names["tiers"] == ["nvlink5-nvl72", "ib-ndr-400"]
    with pytest.raises(cd.SpecError, match="system.scale_up_domain .* not together"):
        cd.load_run_dict(doc(scale_up_domain=64, tiers=tiers))
    with pytest.raises(cd.SpecError, match="system.scale_up_domain = 0"):
        cd.load_run_dict(doc(scale_up_domain=0))
    with pytest.raises(cd.SpecError, match="system.scale_out = 800 .* fabric preset name"):
        cd.load_run_dict(doc(scale_up_domain=64, scale_out=800))


def test_set_overrides_a_key_as_editing_the_file_would(tmp_path, capsys):
    """``--set KEY=VALUE`` (TOML values, ``[i]`` into an array of tables) gives the report of
    the edited file; a malformed override is one line, exit 2."""
    sets = ["--set", "system.tiers[1].bandwidth_gbps=100", "--set", "strategy.tp=4"]
    assert main(["evaluate", str(write(tmp_path, good(dp=8))), "--json", *sets]) == 0
    got = json.loads(capsys.readouterr().out)
    edited = write(tmp_path, good(bw=100.0, tp=4, dp=8), "edited.toml")
    assert main(["evaluate", str(edited), "--json"]) == 0
    assert got == json.loads(capsys.readouterr().out)
    for bad, why in [
        ("strategy.tp", "KEY=VALUE"),
        ("system.tiers[5].domain=8", "system.tiers has 2 table(s)"),
        ("strategy.tp.x=1", "strategy.tp is a value"),
    ]:
        assert main(["evaluate", str(edited), "--set", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("codesign: error: --set") and why in err and "\n" not in err
    pb = cd.search.load_problem(
        REPO / "experiments/problems/gpt3-175b-a100-codesign-cost.toml",
        ["title=what if", 'model.preset="llama3-8b"'],
    )
    assert pb.title == "what if" and float(pb.cfg.model.layers) == 32


def test_custom_accelerator_needs_no_fp8_peak_unless_it_trains_in_fp8():
    doc = {
        "model": {"preset": "llama3-8b"},
        "training": {"global_batch": 64},
        "system": {
            "num_accelerators": 8,
            "peak_tflops": 500.0,
            "hbm_gb": 96.0,
            "hbm_tbps": 3.0,
            "power_w": 600.0,
            "price_usd": 20000.0,
            "tiers": [{"preset": "nvlink4", "domain": 8}],
        },
        "strategy": {"tp": 1, "pp": 1, "dp": 8},
    }
    cfg = cd.load_run_dict(doc)
    assert float(cfg.system.accelerator.peak_tflops_fp8) == 0.0
    assert float(cd.evaluate(*cfg.specs()).step_time_s) > 0
    doc["training"]["precision"] = "fp8"
    with pytest.raises(cd.SpecError) as e:
        cd.load_run_dict(doc)
    assert e.value.field == "training.precision"


@pytest.mark.parametrize(("table", "key"), [("strategy", "etp"), ("model", "mlp_free_layers")])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_counts_name_their_field(table, key, value):
    """NaN or infinity in a count that may be 0 (or, for mlp_free_layers, negative) is an
    input error naming the field, not a ValueError from an int() deep in the checks."""
    d = small_doc()
    d["model"] = {"preset": "nemotron-h-8b"}
    d[table][key] = value
    with pytest.raises(cd.SpecError, match=f"{table}.{key}"):
        cd.load_run_dict(d)


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ("strategy", "tp"),
        ("strategy", "microbatch"),
        ("model", "layers"),
        ("training", "global_batch"),
        ("system", "num_accelerators"),
    ],
)
@pytest.mark.parametrize("value", [2.0**53 + 2, 1e300])
def test_counts_beyond_exact_float64_integers_name_their_field(table, key, value):
    """A count above 2**53 is an input error naming the field: float64 holds every integer
    only that far, so an integer test and the divisibility rules would say nothing there."""
    d = small_doc()
    d[table][key] = value
    with pytest.raises(cd.SpecError, match=rf"{table}.{key} = .*2\*\*53"):
        cd.load_run_dict(d)
