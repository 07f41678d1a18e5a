"""How a recipe fact is written: its value and the recipe file it was read from.

Each fact is ``{"value", "source"}``, the source naming the file and commit of
NVIDIA-NeMo/Megatron-Bridge (:mod:`codesign.calibration._bridge_recipes`,
:mod:`codesign.calibration._bridge_recipes26`).
"""

from __future__ import annotations

__all__ = ["MB", "fact", "assumed"]

MB = "NVIDIA-NeMo/Megatron-Bridge"


def fact(value, source: str) -> dict:
    """A setting read from a recipe file: ``{"value": value, "source": source}``."""
    return {"value": value, "source": source}


def assumed(value, what: str) -> dict:
    """A setting not found in the recipe: the Megatron-Core default, flagged ASSUMED.

    >>> assumed(False, "tp_comm_overlap not set")["source"]
    'not found: ASSUMED Megatron-Core default (tp_comm_overlap not set)'
    """
    return {"value": value, "source": f"not found: ASSUMED Megatron-Core default ({what})"}
