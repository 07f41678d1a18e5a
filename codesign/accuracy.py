"""The measured accuracy of a prediction: what ``codesign evaluate`` prints as the expected error.

The calibration (:mod:`codesign.calibration`) holds out measured runs and stores, in each
efficiency preset, the errors of its generation's held-out runs per software stack and kind
of model (``calibrated_held_out_error``; :func:`codesign.calibration._presets.held_out_by_setting`)
or, for an accelerator of an architecture with no measured run, the errors of a generation
held out whole (``calibrated_unmeasured_error``).  :func:`held_out_error` picks the figures
that apply to one run.
"""

from __future__ import annotations

from codesign.specs import Model

__all__ = ["held_out_error"]


def held_out_error(
    eff_base: dict,
    stack: str | None,
    model: Model,
    overridden: bool = False,
    untested: tuple = (),
):
    """The accuracy measured for a run's setting: the calibrated preset's held-out errors
    (``calibrated_held_out_error``, :func:`codesign.calibration._presets.held_out_by_setting`)
    of its generation, the run's ``stack`` and kind of model (``"moe"`` with experts, else
    ``"dense"``): ``{"generation", "stack", "kind", "overridden", mape_pct, p90_pct, bias_pct,
    rows, splits[, release_mape_pct, release_rows]}``, ``rows = 0`` where no measured run of
    that setting exists, None without a calibrated preset; for an accelerator of an
    architecture with no measured run, ``rows = 0`` and ``unmeasured_architecture`` (the errors
    of a generation held out whole).  ``overridden``: the run's ``[efficiency]`` changes
    calibrated values (the figures are the preset's).  ``untested``: settings of the run that
    no measured run behind the figures used (e.g. ``"FP8 attention"``), listed with them."""
    table = eff_base.get("calibrated_held_out_error")
    noted = {"untested": list(untested)} if untested else {}
    kind = "moe" if float(model.moe_experts) > 0 else "dense"
    unmeasured = eff_base.get("calibrated_unmeasured_error")
    if not isinstance(table, dict) and isinstance(unmeasured, dict):
        return {
            "generation": eff_base.get("calibrated_generation"),
            "stack": stack,
            "kind": kind,
            "overridden": overridden,
            "rows": 0,
            "unmeasured_architecture": unmeasured,
            **noted,
        }
    if not isinstance(table, dict):
        return None
    stats = (table.get(stack or "") or {}).get(kind) or {"rows": 0}
    return {
        "generation": eff_base.get("calibrated_generation"),
        "stack": stack,
        "kind": kind,
        "overridden": overridden,
        **stats,
        **noted,
    }
