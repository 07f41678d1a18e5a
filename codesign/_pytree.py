"""One decorator for spec pytrees (the jax-md pattern).

A spec is a frozen, keyword-only dataclass registered with
:func:`jax.tree_util.register_dataclass`: every field is a dynamic leaf unless it is
declared with :func:`static_field`, in which case it is part of the tree structure
(changing it recompiles).  Update with :func:`dataclasses.replace`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

__all__ = ["pytree_dataclass", "static_field", "replace"]


def static_field(**kwargs: Any) -> Any:
    """A dataclass field that is static (part of the treedef, not a leaf)."""
    metadata = dict(kwargs.pop("metadata", {}))
    metadata["static"] = True
    return dataclasses.field(metadata=metadata, **kwargs)


def pytree_dataclass(cls: type) -> type:
    """Make ``cls`` a frozen kw-only dataclass and register it as a pytree."""
    cls = dataclasses.dataclass(frozen=True, kw_only=True)(cls)
    data, meta = [], []
    for f in dataclasses.fields(cls):
        (meta if f.metadata.get("static", False) else data).append(f.name)
    return jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)


def replace(obj: Any, **changes: Any) -> Any:
    """:func:`dataclasses.replace`, re-exported for convenience."""
    return dataclasses.replace(obj, **changes)
