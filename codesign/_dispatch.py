"""One transfer per call: the leaves of a concrete configuration packed into one array.

A jitted call converts every Python-float leaf into a device array of its own, and a
configuration has about 170 of them: that conversion took 0.47 ms of a 0.66 ms checked
:func:`codesign.evaluate`.  :func:`packed_jit` packs them on the host into one float64
vector (the tree and every leaf's shape static), so a call transfers one array and the
compiled program slices it back into the leaves.  Calls whose leaves are not all Python
floats and float64 NumPy arrays (device arrays, other dtypes) take the plain jit.
"""

from __future__ import annotations

import math

import jax
import numpy as np

from codesign._compile import jit

__all__ = ["packed_jit"]


def packed_jit(fn):
    """A jit of ``fn`` (:func:`codesign._compile.jit`) packing host float leaves into one array.

    Example:
        >>> import numpy as np
        >>> f = packed_jit(lambda a, b: a["x"] * b + a["v"].sum())
        >>> float(f({"x": 2.0, "v": np.array([1.0, 2.0, 3.0])}, 4.0))
        14.0
    """

    def unpack(flat, layout):
        treedef, shapes = layout
        leaves, i = [], 0
        for shape in shapes:
            n = math.prod(shape)
            leaves.append(flat[i : i + n].reshape(shape))
            i += n
        return fn(*jax.tree_util.tree_unflatten(treedef, leaves))

    packed = jit(unpack, static_argnums=(1,))
    plain = jit(fn)

    def call(*args):
        leaves, treedef = jax.tree_util.tree_flatten(args)
        values, shapes = [], []
        for leaf in leaves:
            if type(leaf) is float:
                values.append(leaf)
                shapes.append(())
            elif type(leaf) is np.ndarray and leaf.dtype == np.float64:
                values.extend(leaf.ravel().tolist())
                shapes.append(leaf.shape)
            else:
                return plain(*args)
        return packed(np.asarray(values, dtype=np.float64), (treedef, tuple(shapes)))

    call.packed, call.plain = packed, plain
    call._cache_size = lambda: packed._cache_size() + plain._cache_size()
    return call
