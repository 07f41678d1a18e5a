"""Running the sweep and the optimizer over several hosts (JAX's multi-process runtime).

The exhaustive sweep and the multi-start optimizer run over several hosts through JAX's
multi-process runtime.  Start the same command on every host, with the coordinator's
address, the number of processes and each host's rank in the environment::

    # host 0 (its address is the coordinator's), host 1, ..., host P-1:
    CODESIGN_COORDINATOR=10.0.0.1:12345 CODESIGN_NUM_PROCESSES=4 CODESIGN_PROCESS_ID=0 \\
        codesign sweep experiments/problems/llama3-405b-codesign-3tier.toml --distributed
    CODESIGN_COORDINATOR=10.0.0.1:12345 CODESIGN_NUM_PROCESSES=4 CODESIGN_PROCESS_ID=1 \\
        codesign sweep experiments/problems/llama3-405b-codesign-3tier.toml --distributed
    ...

(``codesign optimize ... --distributed`` likewise.)  ``--distributed`` calls
``jax.distributed.initialize(coordinator_address=..., num_processes=..., process_id=...)``
from these variables before any JAX computation (:func:`initialize_distributed`); without
them, ``jax.distributed.initialize()`` detects SLURM, Open MPI or a TPU pod by itself
(e.g. ``srun -N 4 codesign sweep PROBLEM.toml --distributed``).  Each process then

* **sweep**: enumerates its share of the grid (the values of the outermost axis that has at
  least one value per process are dealt out to the processes), sharded over its own devices
  (``jax.local_devices()``: its GPUs, or its CPU cores with
  ``XLA_FLAGS=--xla_force_host_platform_device_count=<cores>``), and one
  ``multihost_utils.process_allgather`` at the end merges the top-k, the counts and the
  per-axis profiles, so every process holds the same global result (process 0 prints it);
* **optimize**: runs ``starts`` relaxed starts of its own (keys ``fold_in(key(seed),
  process_id)``), rounds and polishes its best point exactly, and the processes agree on
  the best design with one all-gather; the exact-evaluation counts add up.

The grid is dealt out by process rather than sharded over a global mesh, so no collective
runs during the sweep and results never have to be fetched from another host's devices.
A single process with ``--distributed`` (``CODESIGN_NUM_PROCESSES=1``) gives the same
result as without it.  ``tests/test_distributed.py`` runs two real processes on one machine
(``127.0.0.1`` as the coordinator, CPU collectives over gloo) and checks that the sweep's
optimum, top-k, counts and profiles equal the single-process sweep's and that the
optimizer's merge returns the best of the two processes' designs on both, with the exact
evaluations summed.  Not tested across physical hosts.
"""

from __future__ import annotations

import os

import jax
import numpy as np

from codesign.search._evaluator import CHECKS
from codesign.search._problem import Problem
from codesign.search._sweep import SweepResult, sweep
from codesign.specs import SpecError

__all__ = ["initialize_distributed", "allgather_best", "distributed_sweep"]


def initialize_distributed() -> None:
    """``jax.distributed.initialize`` from ``CODESIGN_COORDINATOR`` (host:port),
    ``CODESIGN_NUM_PROCESSES`` and ``CODESIGN_PROCESS_ID`` (optionally
    ``CODESIGN_LOCAL_DEVICE_IDS``, comma-separated); without them, JAX's own cluster
    detection (SLURM, Open MPI, TPU pods).  Call before any JAX computation."""
    env = os.environ
    kw = {}
    if env.get("CODESIGN_COORDINATOR"):
        kw["coordinator_address"] = env["CODESIGN_COORDINATOR"]
        n = _env_int("CODESIGN_NUM_PROCESSES", "1", "a positive integer (how many processes)")
        if n < 1:
            raise SpecError("CODESIGN_NUM_PROCESSES", n, "a positive integer (how many processes)")
        rank = _env_int(
            "CODESIGN_PROCESS_ID", "0", f"this process's rank, an integer in [0, {n - 1}]"
        )
        if not 0 <= rank < n:
            raise SpecError(
                "CODESIGN_PROCESS_ID", rank, f"this process's rank, an integer in [0, {n - 1}]"
            )
        kw["num_processes"], kw["process_id"] = n, rank
    if env.get("CODESIGN_LOCAL_DEVICE_IDS"):
        try:
            kw["local_device_ids"] = [int(x) for x in env["CODESIGN_LOCAL_DEVICE_IDS"].split(",")]
        except ValueError:
            raise SpecError(
                "CODESIGN_LOCAL_DEVICE_IDS",
                env["CODESIGN_LOCAL_DEVICE_IDS"],
                "comma-separated integers",
            ) from None
    try:
        jax.distributed.initialize(**kw)
    except (ValueError, RuntimeError) as e:
        if kw:
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SpecError(
            "--distributed",
            "no cluster found",
            "CODESIGN_COORDINATOR (host:port), CODESIGN_NUM_PROCESSES and CODESIGN_PROCESS_ID set, "
            f"or a cluster JAX detects (SLURM, Open MPI, TPU pod); JAX said: {first}",
        ) from None


def _env_int(name: str, default: str, allowed: str) -> int:
    text = os.environ.get(name, default)
    try:
        return int(text)
    except ValueError:
        raise SpecError(name, text, allowed) from None


def allgather_best(pt: tuple, val: float, n_evals: int, relaxed: float):
    """The best point over all processes, its relaxed objective and the summed evaluations."""
    from jax.experimental import multihost_utils

    g = multihost_utils.process_allgather(
        {
            "pt": np.asarray(pt, dtype=np.int64),
            "val": np.asarray(val, dtype=float),
            "n": np.asarray(n_evals, dtype=np.int64),
            "relaxed": np.asarray(relaxed, dtype=float),
        }
    )
    j = int(np.argmin(g["val"]))
    return (
        tuple(int(i) for i in g["pt"][j]),
        float(g["val"][j]),
        int(np.sum(g["n"])),
        float(g["relaxed"][j]),
    )


def distributed_sweep(
    problem: Problem,
    top_k: int = 5,
    progress: bool = True,
    distributed: bool = False,
    block_size: int = 4096,
    diagnose: bool = False,
) -> SweepResult:
    """The exhaustive sweep of ``problem``; with ``distributed`` and several processes, each
    process sweeps its share of the outermost axis on its local devices and the results are
    merged (every process returns the same global result).  ``block_size`` and ``diagnose``:
    see :func:`codesign.search.sweep`."""
    axes = problem.exhaustive_axes()
    kw = dict(
        objective=problem.objective,
        constraints=problem.constraints,
        top_k=top_k,
        block_size=block_size,
        diagnose=diagnose,
    )
    nproc = jax.process_count() if distributed else 1
    if nproc == 1:
        return sweep(problem.cfg, axes, progress=progress, **kw)
    from jax.experimental import multihost_utils

    paths = list(axes)
    shape = [len(v) for v in axes.values()]
    checks = CHECKS if diagnose else CHECKS[:2]
    # Deal out the values of the outermost axis with at least one value per process.
    split = next((a for a, n in enumerate(shape) if n >= nproc), int(np.argmax(shape)))
    name = paths[split]
    vals = list(axes[name])
    mine = np.array_split(np.arange(len(vals)), nproc)[jax.process_index()]
    if len(mine):
        local_axes = {**axes, name: [vals[i] for i in mine]}
        res = sweep(problem.cfg, local_axes, progress=progress, devices=jax.local_devices(), **kw)
        lshape = [len(v) for v in local_axes.values()]
        if len(res.best_indices):
            loc = list(np.unravel_index(res.best_indices, lshape))
            loc[split] = np.asarray(loc[split]) + mine[0]
            glob = np.ravel_multi_index(loc, shape)
        else:
            glob = np.zeros(0, np.int64)
        bv = np.full(top_k, np.inf)
        bi = np.full(top_k, -1, np.int64)
        bv[: len(res.best_values)] = res.best_values
        bi[: len(glob)] = glob
        prof = [np.full(n, np.inf) for n in shape]
        for a, p in enumerate(paths):
            if a == split:
                prof[a][mine] = res.profiles[p]
            else:
                prof[a] = res.profiles[p]
        counts = np.asarray([res.counts[c] for c in checks], dtype=np.int64)
        wall = res.wall_s
    else:
        bv, bi = np.full(top_k, np.inf), np.full(top_k, -1, np.int64)
        prof = [np.full(n, np.inf) for n in shape]
        counts, wall = np.zeros(len(checks), np.int64), 0.0
    g = multihost_utils.process_allgather(
        {"bv": bv, "bi": bi, "prof": prof, "counts": counts, "wall": np.asarray(wall)}
    )
    allv, alli = np.asarray(g["bv"]).ravel(), np.asarray(g["bi"]).ravel()
    order = np.argsort(allv, kind="stable")[:top_k]
    keep = order[np.isfinite(allv[order])]
    return SweepResult(
        axes={p: list(axes[p]) for p in paths},
        objective=problem.objective,
        num_points=int(np.prod(shape)),
        num_valid=int(np.asarray(g["counts"])[:, 0].sum()),
        num_feasible=int(np.asarray(g["counts"])[:, 1].sum()),
        counts={c: int(np.asarray(g["counts"])[:, j].sum()) for j, c in enumerate(checks)},
        best_values=allv[keep],
        best_indices=alli[keep],
        profiles={p: np.asarray(g["prof"][a]).min(axis=0) for a, p in enumerate(paths)},
        wall_s=float(np.max(g["wall"])),
    )
