"""TOML run files and named presets -> specs.

A run file has ``[model]``, ``[training]``, ``[system]`` with ``[[system.tiers]]`` (innermost
first), ``[strategy]`` and optionally ``[efficiency]``.  ``[model]``, ``[system]`` and each tier
may name a ``preset`` (``model.preset``, ``system.accelerator``, ``tiers[i].preset``) from the
catalog in ``codesign/hardware/`` (``models.toml``, ``accelerators.toml``, ``fabrics.toml``, each
number with its source); every other key overrides the preset.  The schema is documented in
the README.  Every error is a :class:`~codesign.specs.SpecError` naming the field, the value
and what is allowed, raised before any tracing.

The catalog is package data: the TOML files of ``codesign/hardware/`` (or of the directory
``$CODESIGN_CATALOG`` names), read with :mod:`importlib.resources`, so an installed wheel
carries it.  Efficiency has one default everywhere: the calibrated preset named like the
accelerator (``codesign/hardware/efficiency.toml``), see :func:`efficiency_preset`.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import warnings
from pathlib import Path

from codesign._catalog import (
    _fill,
    _number,
    _preset,
    catalog,
    catalog_dir,
    data_dir,
)
from codesign._overrides import apply_sets
from codesign._strategy_table import _parse_strategy
from codesign.accuracy import held_out_error
from codesign.goodput import default_reliability_preset, reliability_preset
from codesign.pricing import ACCELERATOR_KNOBS, pricing_preset
from codesign.rules import check_strategy
from codesign.specs import (
    PRECISIONS,
    Accelerator,
    Efficiency,
    Model,
    SpecError,
    Strategy,
    System,
    Tier,
    Training,
    check_efficiency,
    check_model,
    check_system,
    check_training,
    plausibility_warnings,
    positive,
    precision_family,
)

__all__ = [
    "RunConfig",
    "catalog",
    "catalog_dir",
    "data_dir",
    "efficiency_preset",
    "system_preset",
    "load_run",
    "load_run_dict",
    "read_toml",
    "model_preset",
    "accelerator_preset",
    "tier_preset",
    "STACKS",
    "PlausibilityWarning",
]


class PlausibilityWarning(UserWarning):
    """A legal value outside its plausible range (see :data:`codesign.specs.PLAUSIBLE`)."""


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A parsed run file: specs plus the readable names they came from."""

    model: Model
    training: Training
    system: System
    strategy: Strategy
    efficiency: Efficiency
    names: dict

    def specs(self):
        """``(model, training, system, strategy, efficiency)`` for :func:`codesign.evaluate`."""
        return self.model, self.training, self.system, self.strategy, self.efficiency


_ACCEL_REFS = ACCELERATOR_KNOBS
_TIER_REFS = ("domain", "latency_us", "oversubscription")


def _with_refs(table: dict, listed: dict, keys) -> dict:
    """``table`` with ``ref_<k>`` set to the listed (preset) value of each priced knob
    (unless given), so that a knob moved away from the listed part is priced at the margin
    (:mod:`codesign.pricing`)."""
    out = dict(table)
    for k in keys:
        if f"ref_{k}" not in out and isinstance(listed.get(k), int | float):
            out[f"ref_{k}"] = float(listed[k])
    return out


def model_preset(name: str, **overrides) -> Model:
    """A :class:`Model` from the catalog, with overrides."""
    t = _preset("models", name, "model.preset")
    t.update(overrides)
    m = _fill(Model, t, "model")
    if m.moe_experts > 0 and m.moe_layers == 0:
        m = dataclasses.replace(m, moe_layers=m.layers)
    return m


def accelerator_preset(name: str, **overrides) -> Accelerator:
    """An :class:`Accelerator` from the catalog, with overrides."""
    t = _preset("accelerators", name, "system.accelerator")
    listed = dict(t)
    t.update(overrides)
    t = _with_refs(t, listed, _ACCEL_REFS)
    return _fill(Accelerator, t, "system", skip={"scale_up", "scale_up_domain", "scale_out"})


def _cross_site(table: dict) -> float:
    """A fabric of kind ``scale-across`` joins sites (``Tier.cross_site``)."""
    return 1.0 if table.get("kind") == "scale-across" else 0.0


def tier_preset(name: str, num_accelerators: float | None = None, **overrides) -> Tier:
    """A :class:`Tier` from the fabric catalog; ``domain = 0`` means the whole cluster."""
    t = _preset("fabrics", name, "system.tiers.preset")
    listed = dict(t)
    t.update(overrides)
    t = _with_refs(t, listed, _TIER_REFS)
    t.setdefault("cross_site", _cross_site(t))
    tier = _fill(Tier, t, "system.tiers")
    if tier.domain == 0 and num_accelerators is not None:
        tier = dataclasses.replace(tier, domain=float(num_accelerators))
    return tier


def system_preset(
    accelerator: str, num_accelerators: float, scale_out: str | None = None, **overrides
) -> System:
    """A two-tier :class:`System`: the accelerator's scale-up domain and a scale-out fabric
    (its preset's ``scale_out`` unless named) that reaches every accelerator.

    Example:
        >>> from codesign.config import system_preset
        >>> sy = system_preset("h100-sxm5-80gb", 64)
        >>> [float(t.domain) for t in sy.tiers]
        [8.0, 64.0]
    """
    a = _preset("accelerators", accelerator, "system.accelerator")
    tiers = (
        tier_preset(a["scale_up"], domain=a["scale_up_domain"]),
        tier_preset(scale_out or a["scale_out"], num_accelerators, domain=float(num_accelerators)),
    )
    overrides.setdefault("pricing", pricing_preset())
    overrides.setdefault(
        "reliability",
        reliability_preset(default_reliability_preset(accelerator, a["scale_up_domain"])),
    )
    return System(
        accelerator=accelerator_preset(accelerator),
        tiers=tiers,
        num_accelerators=float(num_accelerators),
        **overrides,
    )


def efficiency_preset(name: str, stack: str | None = None) -> Efficiency:
    """The calibrated :class:`Efficiency` of an accelerator preset (the one default of the
    library: what :func:`load_run` uses when ``[efficiency]`` names no preset), optionally for
    a software ``stack`` (:data:`STACKS`); ``"uncalibrated"`` gives the class defaults.

    Run-dependent entries (the FP8 GEMM efficiency, unfused attention, per-fabric tier
    efficiencies) are applied by :func:`load_run`, which knows the run.

    Example:
        >>> from codesign.config import efficiency_preset
        >>> 0 < efficiency_preset("h100-sxm5-80gb").gemm_max <= 1
        True
    """
    if stack is not None and stack not in STACKS:
        raise SpecError("efficiency.stack", stack, f"one of {', '.join(STACKS)}")
    base, _ = _apply_stack(_preset("efficiency", name, "efficiency.preset"), stack)
    return _efficiency(base)


def _efficiency(table: dict) -> Efficiency:
    """A checked :class:`Efficiency` from a preset table (provenance and ``calibrated_*``
    entries skipped)."""
    skip = {k for k in table if k.startswith("calibrated_") or k in _EFFICIENCY_PROVENANCE_KEYS}
    eff = _fill(Efficiency, table, "efficiency", skip=skip)
    check_efficiency(eff)
    return eff


def _section(doc: dict, name: str, required: bool = True) -> dict:
    sec = doc.get(name)
    if sec is None:
        if required:
            raise SpecError(f"[{name}]", None, f"a [{name}] table is required")
        return {}
    if not isinstance(sec, dict):
        raise SpecError(f"[{name}]", sec, "a table")
    return dict(sec)


def _hybrid_counts(pattern, doc: dict) -> dict:
    """Counts of a Nemotron-H ``hybrid_override_pattern`` (``M`` Mamba-2 mixer, ``*`` attention,
    ``-`` dense MLP, ``E`` MoE MLP, one block each; arXiv:2504.03624): ``layers`` = mixers
    (``M`` + ``*``), ``mamba_layers`` = ``M``, ``moe_layers`` = ``E`` and ``mlp_free_layers`` =
    ``layers - E - count('-')``, so that the ``layers`` depth-averaged layers carry exactly the
    pattern's mixers and MLPs; with more MLP blocks than mixers it is negative (each layer then
    holds more than one MLP on average).  The pipeline split sees ``layers`` blocks."""
    if pattern is None:
        return {}
    if not isinstance(pattern, str) or not pattern or set(pattern) - set("M*-E"):
        raise SpecError("model.hybrid_pattern", pattern, "a string of M, *, - and E")
    mixers = pattern.count("M") + pattern.count("*")
    if mixers == 0:
        raise SpecError("model.hybrid_pattern", pattern, "at least one M or * (mixer) block")
    given = {k: doc.get(k) for k in ("layers", "mamba_layers", "moe_layers", "mlp_free_layers")}
    counts = {
        "layers": float(mixers),
        "mamba_layers": float(pattern.count("M")),
        "moe_layers": float(pattern.count("E")),
        "mlp_free_layers": float(mixers - pattern.count("E") - pattern.count("-")),
    }
    for k, v in counts.items():
        if given[k] not in (None, 0, 0.0) and float(given[k]) != v:
            raise SpecError(f"model.{k}", given[k], f"{v:g} as model.hybrid_pattern implies")
    return counts


def _parse_model(sec: dict) -> tuple[Model, str]:
    name = sec.pop("preset", None)
    base = _preset("models", name, "model.preset") if name is not None else {}
    counts = _hybrid_counts(sec.pop("hybrid_pattern", None), sec)  # overrides the preset's
    base.update(sec)
    base.update(counts)
    m = _fill(Model, base, "model")
    if m.moe_experts > 0 and m.moe_layers == 0:
        m = dataclasses.replace(m, moe_layers=m.layers)
    check_model(m)
    return m, name or "custom"


def _parse_training(sec: dict) -> Training:
    precision = sec.pop("precision", "bf16")
    if precision not in PRECISIONS:
        raise SpecError("training.precision", precision, f"one of {list(PRECISIONS)}")
    mixed = sec.pop("first_last_layers_bf16", None)
    if mixed is not None and not isinstance(mixed, bool):
        raise SpecError("training.first_last_layers_bf16", mixed, "true or false")
    t = _fill(Training, sec, "training", skip={"precision"})
    if mixed is None:  # on when the run has 16-bit layers
        mixed = t.bf16_layers_start > 0 or t.bf16_layers_end > 0
    t = dataclasses.replace(t, precision=precision, first_last_layers_bf16=mixed)
    check_training(t)
    return t


_TIER_SHORTHAND = ("scale_up", "scale_up_domain", "scale_out")
"""``[system]`` keys that replace the accelerator preset's default tiers when no
``[[system.tiers]]`` is given: the scale-up fabric, its domain and the scale-out fabric."""


def _parse_system(sec: dict) -> tuple[System, dict]:
    accel_name = sec.pop("accelerator", None)
    tiers_doc = sec.pop("tiers", None)
    accel_keys = {f.name for f in dataclasses.fields(Accelerator)}
    accel_over = {k: sec.pop(k) for k in list(sec) if k in accel_keys}
    base = (
        _preset("accelerators", accel_name, "system.accelerator") if accel_name is not None else {}
    )
    preset_meta = {k: base.get(k) for k in _TIER_SHORTHAND}
    shorthand = {k: sec.pop(k) for k in _TIER_SHORTHAND if k in sec}
    for k, v in shorthand.items():
        if tiers_doc is not None:
            raise SpecError(f"system.{k}", v, "not together with [[system.tiers]] (set it there)")
        if k == "scale_up_domain":
            v = positive(f"system.{k}", v, integer=True)
        elif not isinstance(v, str):
            raise SpecError(f"system.{k}", v, "a fabric preset name (codesign presets fabrics)")
        preset_meta[k] = v
    listed = dict(base)
    base.update(accel_over)
    base = _with_refs(base, listed, _ACCEL_REFS)
    accel = _fill(Accelerator, base, "system", skip={"scale_up", "scale_up_domain", "scale_out"})
    if "num_accelerators" not in sec:
        raise SpecError("system.num_accelerators", None, "required: how many accelerators")
    n = _number("system.num_accelerators", sec["num_accelerators"])
    if tiers_doc is None:
        if not all(preset_meta.values()):
            raise SpecError(
                "system.tiers",
                None,
                "at least one [[system.tiers]] table (innermost first), or an accelerator "
                "preset or system.scale_up, scale_up_domain and scale_out",
            )
        tiers_doc = [
            {"preset": preset_meta["scale_up"], "domain": preset_meta["scale_up_domain"]},
            {"preset": preset_meta["scale_out"], "domain": n},
        ]
    if not isinstance(tiers_doc, list) or not all(isinstance(t, dict) for t in tiers_doc):
        raise SpecError("system.tiers", tiers_doc, "an array of tables [[system.tiers]]")
    tiers, tier_names, tier_presets, tier_eff_set = [], [], [], []
    for i, td in enumerate(tiers_doc):
        td = dict(td)
        pname = td.pop("preset", None)
        label = td.get("name", pname or f"tier{i}")
        if not isinstance(label, str):
            raise SpecError(f"system.tiers[{i}].name", label, "a string")
        tb = _preset("fabrics", pname, f"system.tiers[{i}].preset") if pname is not None else {}
        listed = dict(tb)
        tb.update(td)
        tb = _with_refs(tb, listed, _TIER_REFS)
        tb.setdefault("cross_site", _cross_site(tb))
        tier = _fill(Tier, tb, f"system.tiers[{i}]")
        if tier.domain == 0:
            tier = dataclasses.replace(tier, domain=n)
        tiers.append(tier)
        tier_names.append(label)
        tier_presets.append(pname)
        tier_eff_set.append("efficiency" in tb)
    rel_doc = sec.pop("reliability", {}) or {}
    if not isinstance(rel_doc, dict):
        raise SpecError("system.reliability", rel_doc, "a table (preset = ... and overrides)")
    rel_doc = dict(rel_doc)
    rel_name = rel_doc.pop("preset", "auto")
    if rel_name == "auto":  # by platform: default_reliability_preset
        rel_name = default_reliability_preset(accel_name, float(tiers[0].domain))
    reliability = reliability_preset(rel_name, **rel_doc)
    pricing_doc = sec.pop("pricing", {}) or {}
    if not isinstance(pricing_doc, dict):
        raise SpecError("system.pricing", pricing_doc, "a table of marginal prices")
    system = _fill(
        System,
        {**sec, "num_accelerators": n},
        "system",
        skip={"accelerator", "tiers", "pricing", "reliability"},
        extra={
            "accelerator": accel,
            "tiers": tuple(tiers),
            "pricing": pricing_preset(**pricing_doc),
            "reliability": reliability,
        },
    )
    check_system(system)
    for msg in plausibility_warnings(system):
        warnings.warn(msg, PlausibilityWarning, stacklevel=4)
    return system, {
        "accelerator": accel_name or "custom",
        "tiers": tier_names,
        "tier_presets": tier_presets,
        "_tier_efficiency_set": tier_eff_set,
        "reliability": rel_name if float(reliability.enabled) > 0 else "none",
    }


def load_run_dict(doc: dict, check: bool = True) -> RunConfig:
    """Parse a run document (the dict form of a run TOML)."""
    if not isinstance(doc, dict):
        raise SpecError("config", type(doc).__name__, "a TOML document with tables")
    known = {"model", "training", "system", "strategy", "efficiency", "title", "description"}
    for k in doc:
        if k not in known:
            raise SpecError(f"[{k}]", "...", f"a known table: {', '.join(sorted(known))}")
    model, model_name = _parse_model(_section(doc, "model"))
    training = _parse_training(_section(doc, "training"))
    system, sys_names = _parse_system(_section(doc, "system"))
    strategy = _parse_strategy(_section(doc, "strategy"), model, system.num_accelerators)
    eff_sec = _section(doc, "efficiency", required=False)
    eff_name = eff_sec.pop("preset", None)
    stack = eff_sec.pop("stack", None)
    if stack is not None and stack not in STACKS:
        raise SpecError("efficiency.stack", stack, f"one of {', '.join(STACKS)}")
    # Without an explicit preset, the calibrated table named like the accelerator preset
    # (codesign/hardware/efficiency.toml) is the default; keys of [efficiency] still override it, and
    # preset = "uncalibrated" selects the codesign.Efficiency() class defaults.
    accel_name = sys_names["accelerator"]
    default_eff = eff_name is None and accel_name in catalog()["efficiency"]
    base_name = accel_name if default_eff else eff_name
    eff_base = (
        _preset("efficiency", base_name, "efficiency.preset") if base_name is not None else {}
    )
    eff_base, stack = _apply_stack(eff_base, stack)
    system = _apply_calibrated(eff_base, eff_sec, training, strategy, system, sys_names)
    calibrated = {"calibrated_held_out_error", "calibrated_unmeasured_error"} & set(eff_base)
    overridden = bool(calibrated) and bool(set(eff_sec) & _EFF_FIELDS)
    eff_base.update(eff_sec)
    efficiency = _efficiency(eff_base)
    if check:
        check_strategy(strategy, model, training, system)
    sys_names = {k: v for k, v in sys_names.items() if not k.startswith("_")}
    eff_label = eff_name or (f"{accel_name} (calibrated default)" if default_eff else "default")
    if stack is not None:
        eff_label = f"{eff_label}, stack {stack}"
    names = {
        "model": model_name,
        **sys_names,
        "efficiency": eff_label,
        "stack": stack,
        "held_out": held_out_error(
            eff_base,
            stack,
            model,
            overridden=overridden,
            untested=("FP8 attention",) if float(training.fp8_attention) > 0 else (),
        ),
    }
    return RunConfig(model, training, system, strategy, efficiency, names)


STACKS = {
    "megatron": "Megatron-LM (NVIDIA, 2022: Korthikanti et al. runs)",
    "megatron-2021": "Megatron-LM (NVIDIA, early 2021: Narayanan et al. SC21 runs)",
    "nemo": "NeMo / Megatron-Core with Transformer Engine (NVIDIA DGX Cloud recipes, 2024-25)",
    "composer": "MosaicML Composer / llm-foundry with PyTorch FSDP (2023)",
    "bridge": "Megatron-Bridge / Megatron-Core (NVIDIA NeMo 25.09 / 25.11 performance recipes)",
}
"""Software stacks with their own calibrated efficiencies (``[efficiency] stack = ...``).

Achieved GEMM, attention and memory-bound efficiency depend on the training software (kernels,
fusion, framework overheads) as much as on the accelerator: on the same H100s the 2023
Composer/FSDP runs reach ~0.40-0.46 MFU where the 2024-25 NeMo recipes reach ~0.50-0.60.  An
efficiency preset may carry ``[<preset>.stacks.<stack>]`` tables whose keys override the
preset's for that stack, and ``default_stack`` names the stack its top-level values are."""


def _apply_stack(eff_base: dict, stack: str | None) -> tuple[dict, str | None]:
    """The preset with the chosen stack's overrides applied, and the stack in effect.

    Without ``stack`` the preset's ``default_stack`` (if any) is reported and nothing changes;
    a stack the preset has no (or an empty) table for keeps the top-level values, i.e. those of
    ``default_stack``.
    """
    eff_base = dict(eff_base)
    tables = eff_base.pop("stacks", None) or {}
    default = eff_base.get("default_stack")
    if stack is None:
        return eff_base, default
    if not isinstance(tables, dict):
        raise SpecError("efficiency.stacks", tables, "a table of stack tables")
    over = tables.get(stack)
    if over:
        eff_base.update({k: v for k, v in over.items() if k not in ("name", "note", "source")})
    return eff_base, stack


_EFF_FIELDS = frozenset(f.name for f in dataclasses.fields(Efficiency))

_EFFICIENCY_PROVENANCE_KEYS = ("rows", "split", "date", "tiers", "inherits", "default_stack")
"""Keys of an efficiency preset that are provenance, not :class:`Efficiency` fields (besides
``name``/``source``/``note``/``notes`` and any key starting with ``calibrated_``)."""


def _apply_calibrated(
    eff_base: dict, eff_sec: dict, training, strategy, system, sys_names
) -> System:
    """Apply the ``calibrated_*`` entries of an efficiency preset that depend on the run.

    * ``calibrated_gemm_max_fp8``: ``gemm_max`` of FP8 GEMMs (relative to the FP8 peak), used
      when ``training.precision`` is an FP8 (or, without ``calibrated_gemm_max_fp4``, FP4)
      recipe and ``[efficiency]`` does not set ``gemm_max``; ``calibrated_gemm_max_mxfp8``
      replaces it for ``mxfp8`` where the fit has MXFP8 rows of its own; the preset's 16-bit
      ``gemm_max`` then becomes ``gemm_max_16bit`` (the run's 16-bit layers);
    * ``calibrated_attention_eff_unfused``: ``attention_eff`` when the strategy turns fused
      (flash) attention off and ``[efficiency]`` does not set ``attention_eff``;
    * ``calibrated_tier_efficiency = {fabric preset = fraction}``: the efficiency of every tier
      built from that fabric preset whose table does not set ``efficiency`` itself.

    Updates ``eff_base`` in place and returns the system with tier efficiencies applied.
    """
    family = precision_family(training.precision)
    fp8 = eff_base.get("calibrated_gemm_max_fp8")
    low = eff_base.get("calibrated_gemm_max_fp4", fp8) if family == "fp4" else fp8
    if training.precision == "mxfp8":
        low = eff_base.get("calibrated_gemm_max_mxfp8", fp8)
    if low is not None and family != "half" and "gemm_max" not in eff_sec:
        if "gemm_max" in eff_base and "gemm_max_16bit" not in eff_sec:
            eff_base["gemm_max_16bit"] = eff_base["gemm_max"]  # for the 16-bit layers
        eff_base["gemm_max"] = _number(f"efficiency.calibrated_gemm_max_{family}", low)
    unfused = eff_base.get("calibrated_attention_eff_unfused")
    if (
        unfused is not None
        and float(strategy.flash_attention) == 0.0
        and "attention_eff" not in eff_sec
    ):
        eff_base["attention_eff"] = _number("efficiency.calibrated_attention_eff_unfused", unfused)
    table = eff_base.get("calibrated_tier_efficiency")
    if not table:
        return system
    if not isinstance(table, dict):
        raise SpecError(
            "efficiency.calibrated_tier_efficiency", table, "a table {fabric preset = fraction}"
        )
    tiers = list(system.tiers)
    for i, (pname, explicit) in enumerate(
        zip(sys_names["tier_presets"], sys_names["_tier_efficiency_set"], strict=True)
    ):
        if pname in table and not explicit:
            v = _number(f"efficiency.calibrated_tier_efficiency.{pname}", table[pname])
            if not 0.0 < v <= 1.0:
                raise SpecError(
                    f"efficiency.calibrated_tier_efficiency.{pname}", v, "a fraction in (0, 1]"
                )
            tiers[i] = dataclasses.replace(tiers[i], efficiency=v)
    return dataclasses.replace(system, tiers=tuple(tiers))


def read_toml(path: str | os.PathLike, field: str) -> dict:
    """The document of a TOML file; a missing path, a directory, a binary or malformed file
    is a :class:`SpecError` naming ``field``."""
    p = Path(path)
    if not p.is_file():
        what = "a directory" if p.is_dir() else "missing"
        raise SpecError(field, str(p), f"an existing TOML file (this path is {what})")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise SpecError(field, str(p), "a UTF-8 text TOML file (this one is binary)") from None
    except tomllib.TOMLDecodeError as e:
        raise SpecError(field, str(p), f"valid TOML ({e})") from None


def load_run(path: str | os.PathLike, sets=()) -> RunConfig:
    """Parse and check a run TOML file, with the ``KEY=VALUE`` overrides ``sets`` applied
    first (:func:`codesign._overrides.apply_sets`)."""
    return load_run_dict(apply_sets(read_toml(path, "config"), sets))
