"""``KEY=VALUE`` overrides of a TOML document (the command line's ``--set``).

A what-if without editing the file: ``codesign evaluate run.toml --set strategy.tp=4 --set
system.tiers[1].bandwidth_gbps=100``.  The key is dotted (tables, and ``[i]`` for the i-th
table of an array such as ``system.tiers``); the value is read as TOML (``4``, ``true``,
``[1, 2, 4]``, ``"gb300"``), or as a string where it is not TOML (``model.preset=llama3-8b``).
Missing tables are created; every error is a :class:`~codesign.specs.SpecError` naming the
override.

Example:
    >>> apply_sets({"strategy": {"tp": 8}}, ["strategy.tp=4", "model.preset=llama3-8b"])
    {'strategy': {'tp': 4}, 'model': {'preset': 'llama3-8b'}}
    >>> try:
    ...     apply_sets({}, ["system.tiers[0].domain=64"])
    ... except SpecError as e:
    ...     print(e)
    --set = 'system.tiers[0].domain=64' is invalid: a key into an existing array of tables (system.tiers has none)
"""

from __future__ import annotations

import copy
import re
import tomllib

from codesign.specs import SpecError

__all__ = ["apply_sets"]

_PART = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)(?:\[(\d+)\])?$")


def _value(text: str):
    """``text`` read as a TOML value, else the string itself."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text.strip()


def apply_sets(doc: dict, sets) -> dict:
    """A copy of the document ``doc`` with each ``KEY=VALUE`` of ``sets`` applied in turn."""
    out = copy.deepcopy(doc)
    for item in sets or ():
        key, eq, text = str(item).partition("=")
        parts = [_PART.match(p.strip()) for p in key.split(".")] if eq else [None]
        if not all(parts) or not text.strip():
            raise SpecError("--set", item, "KEY=VALUE with a dotted key, e.g. strategy.tp=4")
        node, path = out, []
        for i, m in enumerate(parts):
            name, index = m.group(1), m.group(2)
            if not isinstance(node, dict):
                inside = ".".join(path)
                raise SpecError("--set", item, f"a key into a table ({inside} is a value)")
            path.append(name)
            where = ".".join(path)
            last = i == len(parts) - 1
            if index is None:  # a key of a table (created where missing)
                holder, slot = node, name
                if not last:
                    node.setdefault(name, {})
            else:  # a table of an existing array of tables
                holder, slot = node.get(name), int(index)
                n = len(holder) if isinstance(holder, list) else 0
                if slot >= n:
                    have = f"{n} table(s)" if n else "none"
                    raise SpecError(
                        "--set",
                        item,
                        f"a key into an existing array of tables ({where} has {have})",
                    )
            if last:
                holder[slot] = _value(text)
            else:
                node = holder[slot]
    return out
