"""The preset catalog on disk and the table -> dataclass filler that every loader shares.

The catalog is package data: the TOML files of ``codesign/hardware/`` (or of the directory
``$CODESIGN_CATALOG`` names), read with :mod:`importlib.resources`, so an installed wheel
carries it.  :func:`_fill` builds a spec dataclass from a TOML table, checking every key and
number type (a :class:`~codesign.checks.SpecError` names the field, the value and what is
allowed).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from codesign.checks import SpecError

__all__ = ["catalog_dir", "data_dir", "catalog"]

_META_KEYS = {"name", "source", "note", "notes", "kind"}


def catalog_dir() -> Path:
    """Directory holding ``models.toml``, ``accelerators.toml``, ``fabrics.toml`` and
    ``efficiency.toml`` (package data, or ``$CODESIGN_CATALOG``)."""
    env = os.environ.get("CODESIGN_CATALOG")
    return Path(env) if env else Path(str(resources.files("codesign") / "hardware"))


def data_dir() -> Path:
    """Directory of the package's data files (``measured_runs.json``, ``hardware_specs.json``)."""
    return Path(str(resources.files("codesign") / "data"))


@functools.cache
def _load_catalog(path: str) -> dict:
    out = {}
    for kind in ("models", "accelerators", "fabrics", "efficiency"):
        f = Path(path) / f"{kind}.toml"
        out[kind] = tomllib.loads(f.read_text()) if f.exists() else {}
    return out


def _load_catalog_file(kind: str) -> dict:
    f = catalog_dir() / f"{kind}.toml"
    return tomllib.loads(f.read_text()) if f.exists() else {}


def catalog() -> dict:
    """The preset catalog: ``{"models": {...}, "accelerators": {...}, "fabrics": {...}}``."""
    return _load_catalog(str(catalog_dir()))


def _preset(kind: str, name: Any, field: str) -> dict:
    table = catalog()[kind]
    if not isinstance(name, str) or name not in table:
        raise SpecError(field, name, f"one of the {kind} presets: {', '.join(sorted(table))}")
    return dict(table[name])


_FLAGS = {"gated_mlp", "tied_embeddings", "dropout"}
"""Numeric fields that are on/off switches: TOML booleans are accepted for them."""


def _number(field: str, value: Any) -> float:
    if isinstance(value, bool):
        if field.rsplit(".", 1)[-1] in _FLAGS:
            return float(value)
        raise SpecError(field, value, "a number (not true/false)")
    if isinstance(value, int | float):
        return float(value)
    raise SpecError(field, value, "a number")


def _fill(
    cls, table: dict, section: str, skip: set = frozenset(), extra: dict | None = None
) -> Any:
    """Build dataclass ``cls`` from ``table``, checking keys and number types (its dynamic
    fields: a static one, such as ``Model.parts``, is not a key)."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.metadata.get("pytree_node", True)}
    kwargs = {}
    for key, value in table.items():
        if key in _META_KEYS or key in skip:
            continue
        if key not in fields:
            allowed = sorted(set(fields) - set(skip))
            raise SpecError(f"{section}.{key}", value, f"a known key: {', '.join(allowed)}")
        kwargs[key] = _number(f"{section}.{key}", value)
    missing = [
        f.name
        for f in fields.values()
        if f.name not in kwargs
        and f.name not in skip
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise SpecError(f"{section}.{missing[0]}", None, "required (set it or choose a preset)")
    return cls(**kwargs, **(extra or {}))
