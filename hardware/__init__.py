"""The catalog: accelerators, fabrics, models (and calibrated efficiencies), with sources.

The data live in TOML files beside this module (``accelerators.toml``, ``fabrics.toml``,
``models.toml``), each number with a ``source``.  ``codesign.config`` reads them as data;
this package adds Python helpers that build :mod:`codesign` specs from them (it depends on
``codesign``, never the reverse).

Example:
    >>> import hardware
    >>> hardware.accelerator("h100-sxm5-80gb").peak_tflops
    989.4
"""

from __future__ import annotations

from codesign.config import accelerator_preset, catalog, model_preset, tier_preset
from codesign.specs import System

__all__ = ["accelerator", "model", "tier", "system", "names"]


def names(kind: str) -> list[str]:
    """Preset names of ``kind`` (models, accelerators, fabrics, efficiency)."""
    return sorted(catalog()[kind])


def accelerator(name: str, **overrides):
    """An :class:`codesign.Accelerator` preset."""
    return accelerator_preset(name, **overrides)


def model(name: str, **overrides):
    """A :class:`codesign.Model` preset."""
    return model_preset(name, **overrides)


def tier(name: str, num_accelerators: float | None = None, **overrides):
    """A :class:`codesign.Tier` from the fabric catalog."""
    return tier_preset(name, num_accelerators, **overrides)


def system(accelerator_name: str, num_accelerators: float, scale_out: str | None = None, **overrides) -> System:
    """A two-tier system: the accelerator's scale-up domain and a scale-out fabric."""
    a = catalog()["accelerators"][accelerator_name]
    tiers = (
        tier(a["scale_up"], domain=a["scale_up_domain"]),
        tier(scale_out or a["scale_out"], num_accelerators, domain=float(num_accelerators)),
    )
    return System(
        accelerator=accelerator(accelerator_name),
        tiers=tiers,
        num_accelerators=float(num_accelerators),
        **overrides,
    )
