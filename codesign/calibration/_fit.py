"""The fit: named efficiency parameters fitted to measured step times by gradient descent (Optax).

The step model is differentiable in every :class:`~codesign.specs.Efficiency` field and in
each tier's ``efficiency``, so calibrating it against measured runs is an ordinary
least-squares fit in a few parameters.  :func:`calibrate` minimizes the (weighted) mean
squared log error

    L(theta) = sum_i w_i (log t_model(x_i; theta) - log t_measured_i)^2 / sum_i w_i
               + prior * mean_j (u_j - u_j0)^2

where ``theta = g(u)`` is reparametrized so that every value stays where it means something
without clipping (``jnp.clip`` has zero gradient outside its bounds): fractions (``gemm_max``,
``attention_eff``, ``hbm_eff``, the overlap efficiencies, tier efficiencies) are
``sigmoid(u)`` in (0, 1); positive quantities (``gemm_half_dim``, ``step_overhead_s``, ...) are
``exp(u)``.  The small ``prior`` term pulls the unconstrained ``u`` towards its start and only
matters for directions the data does not constrain.

**Shared and grouped parameters.**  A parameter can be one number for all rows or one number
per *label* (an accelerator generation, a precision, a fabric): ``groups[name]`` gives each
row's label, the parameter is a table over the distinct labels and every row gathers its own
entry (``table[index]``).  ``tier_efficiency`` is per tier: its labels are one per tier of the
row (e.g. ``("nvlink3", "ib-hdr-200")``; ``None`` keeps that tier's own value).

**Heterogeneous rows.**  Rows differ in static structure (``Training.precision``, the number
of tiers): they are grouped by tree structure, each group's specs are stacked into one pytree
with ``[B]``-shaped leaves (``jax.tree.map(lambda *x: jnp.stack(x), ...)``) and evaluated with
``jax.vmap(evaluate_unchecked)``; all groups are summed in one jitted loss.  The whole
optimization (Adam with a cosine schedule, then optionally L-BFGS) is one ``jax.lax.scan``
under ``jax.jit``, so it is deterministic: the same inputs give the same result, bit for bit,
on the same machine.  Row weights are a dynamic input, so fitting different splits of the
same rows (weight 0 = held out) reuses one compiled program.

Example (synthetic: recover ``gemm_max`` from times the model itself produced):

    >>> import jax; jax.config.update("jax_enable_x64", True)
    >>> import dataclasses, codesign as cd
    >>> from codesign.calibration import calibrate, predict_step_times
    >>> cfg = cd.load_run_dict({"model": {"preset": "llama3-8b"}, "training": {"global_batch": 64},
    ...     "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 8},
    ...     "strategy": {"tp": 2, "pp": 1, "dp": 4}, "efficiency": {"preset": "uncalibrated"}})
    >>> truth = dataclasses.replace(cfg.efficiency, gemm_max=0.7)
    >>> rows = [cfg.specs()[:4] + (truth,)]
    >>> t = predict_step_times(rows, {})
    >>> fit = calibrate([cfg.specs()], t, cd.Efficiency(), ["gemm_max"], steps=300, prior=0.0)
    >>> round(fit.values["gemm_max"]["all"], 3)
    0.7
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from codesign._compile import jit
from codesign.calibration._grouping import TIED, _resolve
from codesign.specs import Efficiency
from codesign.step import evaluate_unchecked

__all__ = [
    "FRACTION_PARAMS",
    "POSITIVE_PARAMS",
    "TIER_EFFICIENCY",
    "ALL",
    "Calibration",
    "calibrate",
    "predict_step_times",
    "ape_pct",
    "group_rows",
    "to_unconstrained",
    "from_unconstrained",
]

TIER_EFFICIENCY = "tier_efficiency"
"""Name of the per-tier collective efficiency parameter (``System.tiers[i].efficiency``)."""

ALL = "all"
"""Label of a parameter shared by every row."""

FRACTION_PARAMS = frozenset(
    {
        "gemm_max",
        "attention_eff",
        "hbm_eff",
        "dp_overlap_eff",
        "dp_overlap_slowdown",
        "dp_comm_eff",
        "tp_overlap_eff",
        "cp_overlap_eff",
        "p2p_overlap_eff",
        "ep_overlap_eff",
        "ep_overlap_flex_ratio",
        "moe_permute_flex_ratio",
        "grouped_gemm_eff",
        "softmax_overlap_eff",
        TIER_EFFICIENCY,
    }
)
"""Parameters that are fractions in (0, 1): ``sigmoid`` reparametrization."""

POSITIVE_PARAMS = frozenset(
    {
        "gemm_half_dim",
        "elementwise_traffic",
        "optimizer_bytes_per_param",
        "step_overhead_s",
        "memory_overhead_gb",
        "backward_factor",
        "moe_imbalance",
        "moe_permute_factor",
        "grouped_gemm_half_tokens",
        "recompute_factor",
        "cp_step_overhead_us",
        "moe_host_expert_us",
        "moe_host_layer_us",
    }
)
"""Positive parameters: ``exp`` reparametrization."""

AT_LEAST_ONE_PARAMS = frozenset({"moe_imbalance"})
"""Positive parameters >= 1 (the busiest expert rank is never below the mean): ``1 + softplus``."""

_EXCESS_START = 0.05  # a start of exactly 1 would sit where softplus has no gradient

DEFAULT_TIER_EFFICIENCY_INIT = 0.9
"""Start value of ``tier_efficiency`` when ``init`` does not give one."""

_EPS_FRACTION = 1e-3  # a start value of exactly 0 or 1 has no finite logit
_EPS_POSITIVE = 1e-6


# --------------------------------------------------------------------------------------
# Reparametrization
# --------------------------------------------------------------------------------------


def to_unconstrained(name: str, value: float) -> float:
    """Unconstrained ``u`` with ``from_unconstrained(name, u) == value`` (start values only).

    A start value on the boundary (a fraction of 1.0, a positive of 0.0) is moved inside by
    a small margin; this is applied once to the start, never during the fit.
    """
    v = float(value)
    if name in FRACTION_PARAMS:
        v = min(max(v, _EPS_FRACTION), 1.0 - _EPS_FRACTION)
        return math.log(v / (1.0 - v))
    if name in AT_LEAST_ONE_PARAMS:
        excess = max(v - 1.0, _EXCESS_START)
        return math.log(math.expm1(excess))  # inverse softplus
    if name in POSITIVE_PARAMS:
        return math.log(max(v, _EPS_POSITIVE))
    raise ValueError(f"unknown calibration parameter {name!r}")


def from_unconstrained(name: str, u):
    """Constrained value of parameter ``name`` from its unconstrained ``u`` (array-friendly)."""
    if name in FRACTION_PARAMS:
        return jax.nn.sigmoid(u)
    if name in AT_LEAST_ONE_PARAMS:
        return 1.0 + jax.nn.softplus(u)
    if name in POSITIVE_PARAMS:
        return jnp.exp(u)
    raise ValueError(f"unknown calibration parameter {name!r}")


def _check_names(param_names: Sequence[str]) -> tuple[str, ...]:
    names = tuple(param_names)
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate parameter names in {names}")
    for n in names:
        if n not in FRACTION_PARAMS and n not in POSITIVE_PARAMS:
            fields = {f.name for f in dataclasses.fields(Efficiency)}
            hint = " (not fitted: a count, not an efficiency)" if n in fields else ""
            raise ValueError(
                f"unknown calibration parameter {n!r}{hint}: one of "
                f"{sorted(FRACTION_PARAMS | POSITIVE_PARAMS)}"
            )
    return names


# --------------------------------------------------------------------------------------
# Rows: grouping by static structure and label indices
# --------------------------------------------------------------------------------------


def _as_specs(row) -> tuple:
    """``(model, training, system, strategy, efficiency)`` from a RunConfig or a tuple (the
    efficiency is explicit, as in :func:`codesign.evaluate`: no hidden default)."""
    if hasattr(row, "specs"):
        row = row.specs()
    row = tuple(row)
    if len(row) != 5:
        raise ValueError("a row is (model, training, system, strategy, efficiency) or a RunConfig")
    return row


def _stack(trees):
    # numpy first: one host array per leaf, one transfer (stacking hundreds of rows leaf by
    # leaf with jnp.stack costs seconds of dispatch).
    return jax.tree.map(
        lambda *x: jnp.asarray(np.stack([np.asarray(v, dtype=float) for v in x])), *trees
    )


def group_rows(rows_specs: Sequence) -> list[tuple[np.ndarray, tuple]]:
    """Group rows by tree structure: ``[(row_indices, stacked_specs), ...]`` in first-seen order.

    Rows in one group share every static field (``Training.precision``, the number of tiers),
    so their specs stack into one pytree with ``[B]``-shaped leaves for ``jax.vmap``.
    """
    specs = [_as_specs(r) for r in rows_specs]
    order: dict[Any, list[int]] = {}
    for i, s in enumerate(specs):
        order.setdefault(jax.tree_util.tree_structure(s), []).append(i)
    return [(np.asarray(ix), _stack([specs[i] for i in ix])) for ix in order.values()]


def _labels_for(name: str, groups: Mapping | None, n_rows: int, n_tiers: list[int]) -> list:
    """Per-row labels of parameter ``name`` (a tuple per row for ``tier_efficiency``)."""
    lab = None if groups is None else groups.get(name)
    if name == TIER_EFFICIENCY:
        if lab is None:
            return [tuple(ALL for _ in range(k)) for k in n_tiers]
        out = []
        for i, t in enumerate(lab):
            t = tuple(t)
            if len(t) != n_tiers[i]:
                raise ValueError(
                    f"groups[{name!r}][{i}] has {len(t)} labels for {n_tiers[i]} tiers"
                )
            out.append(t)
        if len(out) != n_rows:
            raise ValueError(f"groups[{name!r}] has {len(out)} rows, expected {n_rows}")
        return out
    if lab is None:
        return [ALL] * n_rows
    lab = list(lab)
    if len(lab) != n_rows:
        raise ValueError(f"groups[{name!r}] has {len(lab)} rows, expected {n_rows}")
    return lab


def _distinct(labels: list, tier: bool) -> list:
    seen: dict = {}
    for lab in labels:
        for x in lab if tier else (lab,):
            if x is not None and x not in seen:
                seen[x] = None
    return list(seen)


def _index_arrays(names, labels, tables_labels, groups_ix):
    """Per structure group: ``{name: (index [B] or [B, T], mask)}`` into each parameter table.

    ``mask`` is False where the label is ``None`` or not in the table (keep the row's value).
    """
    out = []
    for ix, _ in groups_ix:
        d = {}
        for n in names:
            pos = {lab: k for k, lab in enumerate(tables_labels[n])}
            if n == TIER_EFFICIENCY:
                rows = [labels[n][i] for i in ix]
                idx = np.array([[pos.get(x, 0) for x in r] for r in rows], dtype=np.int32)
                mask = np.array([[x in pos for x in r] for r in rows], dtype=bool)
            else:
                idx = np.array([pos.get(labels[n][i], 0) for i in ix], dtype=np.int32)
                mask = np.array([labels[n][i] in pos for i in ix], dtype=bool)
            d[n] = (jnp.asarray(idx), jnp.asarray(mask))
        out.append(d)
    return out


def _tied_names(names, groups) -> tuple:
    """The :data:`~codesign.calibration._grouping.TIED` parameters with labels in ``groups``
    whose source is among ``names``."""
    return tuple(
        t for t, src in TIED.items() if src in names and groups is not None and t in groups
    )


def _apply(values: dict, stacked: tuple, index: dict) -> tuple:
    """Stacked specs with the fitted parameters gathered per row (``values``: constrained)."""
    model, training, system, strategy, eff = stacked
    repl = {}
    for n, table in values.items():
        if n == TIER_EFFICIENCY:
            continue
        idx, mask = index[n]
        repl[n] = jnp.where(mask, table[idx], getattr(eff, n))
    for n, src in TIED.items():  # another label's entry of the source's table
        if n in index and src in values:
            idx, mask = index[n]
            repl[n] = jnp.where(mask, values[src][idx], getattr(eff, n))
    if repl:
        eff = dataclasses.replace(eff, **repl)
    if TIER_EFFICIENCY in values:
        table = values[TIER_EFFICIENCY]
        idx, mask = index[TIER_EFFICIENCY]
        tiers = tuple(
            dataclasses.replace(t, efficiency=jnp.where(mask[:, i], table[idx[:, i]], t.efficiency))
            for i, t in enumerate(system.tiers)
        )
        system = dataclasses.replace(system, tiers=tiers)
    return model, training, system, strategy, eff


def _group_times(values: dict, stacked: tuple, index: dict):
    return jax.vmap(evaluate_unchecked)(*_apply(values, stacked, index)).step_time_s


@jit
def _predict_jit(values, stacked_list, index_list):
    return [_group_times(values, s, ix) for s, ix in zip(stacked_list, index_list, strict=True)]


# --------------------------------------------------------------------------------------
# The fit
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Result of :func:`calibrate`.

    ``values[name][label]`` is the fitted value of each parameter for each label (``"all"``
    for a shared one); ``start`` the same for the start values.  ``loss_history`` holds the
    objective at every step (Adam steps, then L-BFGS steps); ``loss`` is the final objective
    and ``msle`` its data term (weighted mean squared log error).
    """

    values: dict
    start: dict
    param_names: tuple
    loss_history: np.ndarray
    loss: float
    msle: float
    steps: int
    lbfgs_steps: int
    n_rows_fitted: int

    def value(self, name: str, label: Any = ALL, fallback: Sequence = ()) -> float:
        """Fitted value for ``label``, else for the first of ``fallback`` that was fitted."""
        table = self.values[name]
        for lab in (label, *fallback):
            if lab in table:
                return table[lab]
        raise KeyError(f"{name}: no fitted value for {label!r} or {list(fallback)}")

    def as_dict(self) -> dict:
        return {
            "values": self.values,
            "start": self.start,
            "loss": self.loss,
            "msle": self.msle,
            "steps": self.steps,
            "lbfgs_steps": self.lbfgs_steps,
            "n_rows_fitted": self.n_rows_fitted,
        }


def _start_value(init, name: str, label) -> float:
    if isinstance(init, Efficiency):
        if name == TIER_EFFICIENCY:
            return DEFAULT_TIER_EFFICIENCY_INIT
        return float(getattr(init, name))
    if isinstance(init, Mapping):
        v = init.get(name)
        if v is None:
            if name == TIER_EFFICIENCY:
                return DEFAULT_TIER_EFFICIENCY_INIT
            return float(getattr(Efficiency(), name))
        if isinstance(v, Mapping):
            if label in v:
                return float(v[label])
            if ALL in v:
                return float(v[ALL])
            raise ValueError(f"init[{name!r}] has no value for label {label!r}")
        return float(v)
    raise TypeError("init must be an Efficiency or a mapping name -> value or {label: value}")


@functools.cache
def _make_fit(names: tuple, steps: int, lbfgs_steps: int, lr: float, clip: float):
    """A jitted ``fit(u0, stacked_list, index_list, log_meas_list, w_list, prior)`` for these
    static settings (the optimizer is built here, not read from a global; see the jit-cache
    gotcha in ``jax-practices.md``)."""

    def objective(u, stacked_list, index_list, logm_list, w_list, prior):
        values = {n: from_unconstrained(n, u[n]) for n in names}
        num, den = 0.0, 0.0
        for s, ix, lm, w in zip(stacked_list, index_list, logm_list, w_list, strict=True):
            t = _group_times(values, s, ix)
            r = jnp.log(t) - lm
            num = num + jnp.sum(w * r * r)
            den = den + jnp.sum(w)
        data = num / den
        sq = [jnp.sum((u[n] - u0n) ** 2) for n, u0n in prior[1].items()]
        count = sum(u[n].size for n in names)
        reg = prior[0] * sum(sq) / count
        return data + reg, data

    def fit(u0, stacked_list, index_list, logm_list, w_list, prior):
        def loss(u):
            return objective(u, stacked_list, index_list, logm_list, w_list, prior)[0]

        hist = []
        u = u0
        if steps > 0:
            sched = optax.cosine_decay_schedule(lr, steps, alpha=0.01)
            opt = optax.chain(optax.clip_by_global_norm(clip), optax.adam(sched))
            vg = jax.value_and_grad(loss)

            def body(carry, _):
                p, s = carry
                val, g = vg(p)
                upd, s = opt.update(g, s, p)
                return (optax.apply_updates(p, upd), s), val

            (u, _), h = jax.lax.scan(body, (u, opt.init(u)), None, length=steps)
            hist.append(h)
        if lbfgs_steps > 0:
            lb = optax.lbfgs()
            vgs = optax.value_and_grad_from_state(loss)

            def lbody(carry, _):
                p, s = carry
                val, g = vgs(p, state=s)
                upd, s = lb.update(g, s, p, value=val, grad=g, value_fn=loss)
                return (optax.apply_updates(p, upd), s), val

            (u, _), h = jax.lax.scan(lbody, (u, lb.init(u)), None, length=lbfgs_steps)
            hist.append(h)
        total, data = objective(u, stacked_list, index_list, logm_list, w_list, prior)
        return u, (jnp.concatenate(hist) if hist else jnp.zeros((0,))), total, data

    return jit(fit)


def calibrate(
    rows_specs: Sequence,
    measured_s,
    init: Efficiency | Mapping,
    param_names: Sequence[str],
    groups: Mapping[str, Sequence] | None = None,
    steps: int = 600,
    *,
    lbfgs_steps: int = 0,
    learning_rate: float = 0.05,
    weights=None,
    prior: float = 1e-5,
    clip: float = 1.0,
) -> Calibration:
    """Fit ``param_names`` to measured step times (weighted mean squared log error).

    Args:
        rows_specs: one entry per row: a :class:`~codesign.config.RunConfig` or a tuple
            ``(model, training, system, strategy[, efficiency])``.  Fields that are not
            fitted keep each row's own value (its efficiency, its tiers' efficiencies).
        measured_s: measured step time of each row, seconds (``[N]``).
        init: start values: an :class:`~codesign.specs.Efficiency` or a mapping
            ``name -> value`` or ``name -> {label: value}``.  ``tier_efficiency`` starts at
            0.9 unless the mapping gives it.
        param_names: parameters to fit: :data:`FRACTION_PARAMS` and :data:`POSITIVE_PARAMS`
            (``Efficiency`` fields and ``"tier_efficiency"``).
        groups: ``name -> per-row labels``; a parameter without an entry is shared (label
            ``"all"``).  For ``"tier_efficiency"`` each row's label is a tuple with one label
            per tier (``None`` keeps that tier's own efficiency).  A
            :data:`~codesign.calibration._grouping.TIED` parameter's labels (``None``: keep the
            row's own value) pick an entry of its fitted source's table: the first of the label
            and its fallback chain that a training row carries.
        steps: Adam steps (cosine-decayed learning rate from ``learning_rate``).
        lbfgs_steps: L-BFGS steps after Adam (0: none).
        weights: per-row weights ``[N]`` (default 1); weight 0 leaves a row out of the fit.
        prior: weight of the pull of the unconstrained parameters towards their start.
        clip: global gradient-norm clip of the Adam updates.

    Returns:
        A :class:`Calibration`.  Deterministic: the same call gives the same values.
    """
    names = _check_names(param_names)
    rows = [_as_specs(r) for r in rows_specs]
    n = len(rows)
    meas = np.asarray(measured_s, dtype=float).reshape(-1)
    if meas.shape[0] != n:
        raise ValueError(f"measured_s has {meas.shape[0]} entries for {n} rows")
    if not np.all(np.isfinite(meas)) or np.any(meas <= 0):
        raise ValueError("measured_s must be positive and finite")
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float).reshape(-1)
    if w.shape[0] != n or np.any(w < 0) or not np.any(w > 0):
        raise ValueError("weights must be [N], non-negative, not all zero")
    n_tiers = [len(r[2].tiers) for r in rows]
    labels = {nm: _labels_for(nm, groups, n, n_tiers) for nm in names}
    # Tables hold the labels of every row, so that fitting other splits of the same rows
    # (other weights) reuses the compiled fit; labels seen only on rows of weight 0 get no
    # gradient from the data, stay at their start and are not reported as fitted.
    fitted_rows = [i for i in range(n) if w[i] > 0]
    tables_labels = {nm: _distinct(labels[nm], nm == TIER_EFFICIENCY) for nm in names}
    fitted_labels = {
        nm: set(_distinct([labels[nm][i] for i in fitted_rows], nm == TIER_EFFICIENCY))
        for nm in names
    }
    for nm in names:
        if not fitted_labels[nm]:
            raise ValueError(f"parameter {nm!r} has no label on any fitted row")
    start = {nm: {lab: _start_value(init, nm, lab) for lab in tables_labels[nm]} for nm in names}
    u0 = {
        nm: jnp.asarray([to_unconstrained(nm, start[nm][lab]) for lab in tables_labels[nm]])
        for nm in names
    }
    tied = _tied_names(names, groups)
    for t in tied:  # resolved against this split's fitted labels of the source
        src = TIED[t]
        labels[t] = [
            _resolve(lab, fitted_labels[src]) for lab in _labels_for(t, groups, n, n_tiers)
        ]
        tables_labels[t] = tables_labels[src]
    groups_ix = group_rows(rows)
    index_list = _index_arrays((*names, *tied), labels, tables_labels, groups_ix)
    stacked_list = [s for _, s in groups_ix]
    logm_list = [jnp.asarray(np.log(meas[ix])) for ix, _ in groups_ix]
    w_list = [jnp.asarray(w[ix]) for ix, _ in groups_ix]
    fit = _make_fit(names, int(steps), int(lbfgs_steps), float(learning_rate), float(clip))
    u, hist, total, data = fit(u0, stacked_list, index_list, logm_list, w_list, (float(prior), u0))
    values = {
        nm: {
            lab: float(from_unconstrained(nm, u[nm][k]))
            for k, lab in enumerate(tables_labels[nm])
            if lab in fitted_labels[nm]
        }
        for nm in names
    }
    start = {
        nm: {lab: v for lab, v in start[nm].items() if lab in fitted_labels[nm]} for nm in names
    }
    return Calibration(
        values=values,
        start=start,
        param_names=names,
        loss_history=np.asarray(hist),
        loss=float(total),
        msle=float(data),
        steps=int(steps),
        lbfgs_steps=int(lbfgs_steps),
        n_rows_fitted=len(fitted_rows),
    )


def predict_step_times(
    rows_specs: Sequence,
    values: Mapping[str, Any],
    groups: Mapping[str, Sequence] | None = None,
) -> np.ndarray:
    """Step time of each row with parameters ``values`` substituted (``[N]``, seconds).

    ``values`` maps a parameter name to one number (all rows) or to ``{label: value}`` (a
    :class:`Calibration`'s ``values``); ``groups`` gives each row's labels as for
    :func:`calibrate`.  Rows whose label is not in a table keep their own value.
    """
    _check_names(list(values))
    rows = [_as_specs(r) for r in rows_specs]
    n = len(rows)
    n_tiers = [len(r[2].tiers) for r in rows]
    tables, tables_labels, labels = {}, {}, {}
    for nm, v in values.items():
        if isinstance(v, Mapping):
            tables_labels[nm] = list(v)
            tables[nm] = jnp.asarray([float(x) for x in v.values()])
            labels[nm] = _labels_for(nm, groups, n, n_tiers)
        else:
            tables_labels[nm] = [ALL]
            tables[nm] = jnp.asarray([float(v)])
            labels[nm] = _labels_for(nm, None, n, n_tiers)
    tied = _tied_names(tuple(values), groups)
    for t in tied:  # labels given already resolved (resolved_groups)
        src = values[TIED[t]]
        own = _labels_for(t, groups, n, n_tiers)
        tables_labels[t] = tables_labels[TIED[t]]
        labels[t] = own if isinstance(src, Mapping) else [None if x is None else ALL for x in own]
    groups_ix = group_rows(rows)
    index_list = _index_arrays((*values, *tied), labels, tables_labels, groups_ix)
    times = _predict_jit(tables, [s for _, s in groups_ix], index_list)
    out = np.empty(n)
    for (ix, _), t in zip(groups_ix, times, strict=True):
        out[ix] = np.asarray(t)
    return out


def ape_pct(predicted, measured) -> np.ndarray:
    """Absolute percentage error ``100 |p - m| / m`` of each row."""
    p = np.asarray(predicted, dtype=float)
    m = np.asarray(measured, dtype=float)
    return 100.0 * np.abs(p - m) / m
