"""Hard or smooth versions of the few non-smooth operations of the step model.

The exact model and the relaxed (differentiable) model share one code path: every max,
min, ceil, clamp and indicator in the formulas goes through a :class:`Smoothing` value.
``Smoothing()`` (``exact=True``) is the exact model.  ``Smoothing(exact=False, tau=t)``
replaces

* ``max``/``min`` by the scale-free p-norm smooth maximum with ``p = 1/tau``
  (``m * (sum (x_i/m)^p)^(1/p)`` with ``m = stop_gradient(max x)``), which never
  underestimates the hard max and overestimates it by at most a factor ``n**tau``;
* ``relu`` (exposed time after overlap) by the softplus ``tau_s*log(1+exp(x/tau_s))``
  with a temperature ``tau_s = tau * scale`` in the units of ``x``;
* ``ceil`` by the straight-through estimator (exact forward value, unit gradient), and
  ``ceil_valid`` (a ceil that the validity rules keep inactive: its argument is an integer
  at every valid configuration) by the argument itself;
* ``step`` (an indicator ``x > 0`` on integer-valued ``x``) by ``clip(x, 0, 1)``, which is
  exact at integers and linear in between.

As ``tau -> 0`` every smooth operation converges to its hard counterpart (``ceil_valid`` is
equal to it at every valid configuration, at any ``tau``), which is what the relaxed-to-exact
convergence tests check at valid configurations.  ``tau`` is a dynamic leaf (annealing it does not
recompile); ``exact`` is static (it selects code).

References: Boyd & Vandenberghe, *Convex Optimization* (2004), 3.1.5 (p-norms and
log-sum-exp as smooth maxima); Bengio, Leonard & Courville, arXiv:1308.3432 (2013),
straight-through estimators.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import struct

__all__ = ["Smoothing", "EXACT", "safe_div", "safe_log", "safe_sqrt"]


def safe_div(num, den, fallback=0.0):
    """``num / den`` where ``den > 0``, else ``fallback``, with finite gradients (double where)."""
    ok = den > 0
    safe_den = jnp.where(ok, den, 1.0)
    return jnp.where(ok, num / safe_den, fallback)


def safe_log(x, fallback=0.0):
    """``log(x)`` where ``x > 0``, else ``fallback``, with finite gradients (double where)."""
    ok = x > 0
    return jnp.where(ok, jnp.log(jnp.where(ok, x, 1.0)), fallback)


def safe_sqrt(x, fallback=0.0):
    """``sqrt(x)`` where ``x > 0``, else ``fallback``, with finite gradients (double where:
    the derivative of ``sqrt`` is infinite at 0)."""
    ok = x > 0
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, x, 1.0)), fallback)


@struct.dataclass(kw_only=True)
class Smoothing:
    """How hard the max, min, ceil and indicator operations of the model are.

    Example:
        >>> import jax.numpy as jnp
        >>> from codesign.smoothing import Smoothing
        >>> float(Smoothing().max(jnp.array(1.0), jnp.array(3.0)))
        3.0
        >>> soft = Smoothing(exact=False, tau=0.05)
        >>> 3.0 <= float(soft.max(jnp.array(1.0), jnp.array(3.0))) < 3.01
        True
    """

    tau: float = 0.0
    """Temperature (dimensionless).  Ignored when ``exact``."""
    exact: bool = struct.field(pytree_node=False, default=True)
    """True selects the exact (hard) model; False the relaxed one."""

    # -- maxima --------------------------------------------------------------------------
    def max(self, *xs):
        """Maximum of arrays broadcast together (smooth p-norm when relaxed; inputs >= 0).

        Relaxed: ``m (sum_i clip(x_i / m, 0, 1)^p)^(1/p)`` with ``p = 1/tau`` and ``m`` the
        hard maximum held constant (at most ``m n^tau`` for ``n`` terms).  Both modes work
        element-wise over the list (``jnp.maximum`` pairs, the p-norm summed term by term),
        which XLA fuses into the surrounding loop: a reduction over a stacked axis would end
        a fused loop (the relaxed search's step, value and gradient, ran about 20 % slower
        with the stack).

        The clip's tie rule gives the largest term half its derivative where its ratio is
        exactly 1 (all of it where rounding puts the ratio an ulp below).  Taking the ratio
        without the clip at 1 (the whole derivative) was tried: the relaxed search then ended
        further from the optimum on the co-design benchmark (relaxed objective 1.180x the
        exhaustive optimum, geometric mean over the 35 entries, against 1.128x;
        ``gpt3-175b-mfu-50`` 3.56x against 1.04x), the exact phase recovering all 35; its
        settings were tuned with the clip."""
        xs = jnp.broadcast_arrays(*xs)
        hard = functools.reduce(jnp.maximum, xs)
        if self.exact:
            return hard
        p = 1.0 / jnp.maximum(self.tau, 1e-6)
        m = jax.lax.stop_gradient(hard)
        safe_m = jnp.where(m > 0, m, 1.0)
        terms = []
        for x in xs:
            ratio = jnp.clip(x / safe_m, 0.0, 1.0)
            terms.append(jnp.where(ratio > 0, jnp.exp(p * safe_log(ratio, -1e30)), 0.0))
        # sum (x/m)^p >= 1 because the largest ratio is 1, so its log is safe.
        s = functools.reduce(jnp.add, terms)
        out = safe_m * jnp.exp(safe_log(s) / p)
        return jnp.where(m > 0, out, hard)

    def max_reduce(self, x, axis=0):
        """Maximum along ``axis`` (inputs >= 0): :meth:`max` of the slices along it."""
        return self.max(*jnp.moveaxis(jnp.asarray(x), axis, 0))

    def argmax_weights(self, *xs):
        """Weights of each argument being the largest: one-hot (first of ties) when exact, a
        softmax at temperature ``tau`` relative to the largest when relaxed.  ``sum_i w_i x_i``
        is then the hard max (exact) or a smooth under-estimate of it."""
        if self.exact:  # x_i wins if above every earlier one and not below any later one
            xs = jnp.broadcast_arrays(*xs)
            win = [
                functools.reduce(
                    jnp.logical_and,
                    [xi > xj for xj in xs[:i]] + [xi >= xj for xj in xs[i + 1 :]],
                    jnp.ones(jnp.shape(xi), bool),
                )
                for i, xi in enumerate(xs)
            ]
            return [jnp.where(w, 1.0, 0.0) for w in win]
        xs = jnp.broadcast_arrays(*xs)
        scale = jax.lax.stop_gradient(
            jnp.maximum(functools.reduce(jnp.maximum, [jnp.abs(x) for x in xs]), 1e-30)
        )
        t = jnp.maximum(self.tau, 1e-6) * scale
        logits = [x / t for x in xs]
        top = jax.lax.stop_gradient(functools.reduce(jnp.maximum, logits))
        e = [jnp.exp(v - top) for v in logits]
        total = functools.reduce(jnp.add, e)
        return [v / total for v in e]

    def min(self, *xs):
        """Minimum of positive arrays (smooth as ``1/max(1/x)`` when relaxed)."""
        if self.exact:
            return functools.reduce(jnp.minimum, jnp.broadcast_arrays(*xs))
        inv = [safe_div(1.0, x, 0.0) for x in jnp.broadcast_arrays(*xs)]
        return safe_div(1.0, self.max(*inv), 0.0)

    def clamp(self, x, lo, hi):
        """``min(max(x, lo), hi)`` for positive ``lo <= hi``."""
        return self.min(self.max(x, lo), hi)

    def relu(self, x, scale=1.0):
        """``max(x, 0)``; relaxed: softplus with temperature ``tau * scale`` (units of x)."""
        if self.exact:
            return jnp.maximum(x, 0.0)
        t = jnp.maximum(self.tau * scale, 1e-30)
        return t * jax.nn.softplus(x / t)

    # -- integer operations --------------------------------------------------------------
    def ceil(self, x):
        """``ceil(x)``; relaxed: straight-through (exact value, gradient 1)."""
        if self.exact:
            return jnp.ceil(x)
        return x + jax.lax.stop_gradient(jnp.ceil(x) - x)

    def ceil_valid(self, x):
        """``ceil(x)`` of an ``x`` that is an integer at every valid configuration; relaxed:
        ``x`` itself.

        Both are exact at every valid point; between them the straight-through ceil is a
        staircase no valid point has.  The micro-batch count ``B / (dp * b)`` is such an ``x``
        (the rules require ``dp * b`` to divide ``B``): with the staircase, a relaxed point a
        hair off an exact divisor paid a whole extra micro-batch (at ``B / (dp * b) = 2``, 3
        instead of 2: +50 % step time), so the relaxed search was pushed off every divisor,
        where the best layouts lie.

        Example:
            >>> import jax.numpy as jnp
            >>> from codesign.smoothing import Smoothing
            >>> float(Smoothing().ceil_valid(jnp.array(2.001)))
            3.0
            >>> float(Smoothing(exact=False, tau=0.01).ceil_valid(jnp.array(2.001)))
            2.001
        """
        if self.exact:
            return jnp.ceil(x)
        return x

    def step(self, x):
        """Indicator ``x > 0`` for integer-valued ``x >= 0``; exact at integers either way."""
        if self.exact:
            return jnp.where(jnp.asarray(x) > 0.5, 1.0, 0.0)
        return jnp.clip(x, 0.0, 1.0)

    def before(self, a, b):
        """Soft indicator ``a < b`` for placement ranks (exact: hard comparison)."""
        if self.exact:
            return jnp.where(jnp.asarray(a) < jnp.asarray(b), 1.0, 0.0)
        return jax.nn.sigmoid((b - a) / jnp.maximum(self.tau, 1e-6))


EXACT = Smoothing()
