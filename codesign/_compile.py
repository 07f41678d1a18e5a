"""``jax.jit`` for the model's programs, with compiler options that halve XLA:CPU's compile time.

The step program is about 5,000 scalar operations (Llama 3 8B with every optional part
traced), and on CPU its compile, not its run, is what a user waits for: a first
:func:`codesign.evaluate`, a calibration, a test.  XLA:CPU's fusion emitters (its default
since 2025) take about twice as long on such a program as its elemental IR emitters, and the
programs they emit run no faster here: ``experiments/bench_compile.py`` measures both, side
by side (on the shared 2-core machine, a first ``evaluate`` of GPT-3 175B 4.96 -> 3.11 s, of
DeepSeek-V3 7.39 -> 4.81 s; warm sweep and call rates within noise; max RSS 0.79 -> 0.46 GB;
the same values to the last bit; the fast test tier 1,075 -> 746 s).

:func:`jit` is ``jax.jit`` with ``xla_cpu_use_fusion_emitters=False`` added to its
``compiler_options`` when the program runs on CPU, the installed XLA knows the option, and
the user has not set it in ``XLA_FLAGS`` (theirs rules).  The choice is made at the first
call, not at import, so importing :mod:`codesign` initializes no JAX backend (a user may still
set ``jax_num_cpu_devices`` after the import).
"""

from __future__ import annotations

import functools
import os

import jax

__all__ = ["compiler_options", "jit"]

_CPU_OPTIONS = {"xla_cpu_use_fusion_emitters": False}


@functools.cache
def _cpu_options_apply() -> bool:
    """Whether :data:`_CPU_OPTIONS` apply: CPU backend, an XLA that knows them, not user-set."""
    if any(name in os.environ.get("XLA_FLAGS", "") for name in _CPU_OPTIONS):
        return False
    if jax.default_backend() != "cpu":
        return False
    try:
        jax.jit(lambda x: x + 1.0, compiler_options=_CPU_OPTIONS).lower(1.0).compile()
    except Exception:  # an XLA without the option compiles with its own defaults
        return False
    return True


def compiler_options(extra: dict | None = None) -> dict | None:
    """The compiler options :func:`jit` uses, merged with ``extra`` (``extra`` wins).

    Example:
        >>> opts = compiler_options({"xla_backend_optimization_level": 0})
        >>> opts["xla_backend_optimization_level"]
        0
    """
    opts = dict(_CPU_OPTIONS) if _cpu_options_apply() else {}
    opts.update(extra or {})
    return opts or None


class _LazyJit:
    """``jax.jit(fn, **kwargs)`` built at first use, with :func:`compiler_options` merged in."""

    def __init__(self, fn, kwargs: dict):
        self._fn, self._kwargs, self._jitted = fn, kwargs, None
        functools.update_wrapper(self, fn)

    def _get(self):
        if self._jitted is None:
            kw = dict(self._kwargs)
            kw["compiler_options"] = compiler_options(kw.get("compiler_options"))
            self._jitted = jax.jit(self._fn, **kw)
        return self._jitted

    def __call__(self, *args, **kwargs):
        return self._get()(*args, **kwargs)

    def __getattr__(self, name):  # lower, trace, eval_shape, _cache_size, ...
        if name.startswith("__") or name in ("_fn", "_kwargs", "_jitted"):
            raise AttributeError(name)
        return getattr(self._get(), name)


def jit(fn, **kwargs):
    """``jax.jit(fn, **kwargs)`` with :func:`compiler_options` (``@jit`` or, with arguments,
    ``@functools.partial(jit, static_argnums=...)``, as for ``jax.jit``).

    Example:
        >>> f = jit(lambda x, n: x * n, static_argnums=(1,))
        >>> float(f(2.0, 3))
        6.0
    """
    return _LazyJit(fn, kwargs)
