"""One process of the two-process ``jax.distributed`` test (``tests/test_distributed.py``).

``python tests/distributed_worker.py PROBLEM.toml OUT.json`` with ``CODESIGN_COORDINATOR``,
``CODESIGN_NUM_PROCESSES`` and ``CODESIGN_PROCESS_ID`` in the environment.  On 2 CPU devices
of its own, the process runs

1. the command line, ``codesign sweep PROBLEM --json --distributed`` (which initializes
   ``jax.distributed`` from the environment), its output captured;
2. :func:`codesign.search.distributed_sweep` with ``distributed=True``;
3. :func:`codesign.search.optimize` with ``distributed=True``, recording what this process
   passes to the all-gather of the best design (its own result, from its own keys) and what
   comes back;

and writes all of it to ``OUT.json`` (JSON with ``Infinity`` for empty profile entries).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

TOP_K = 5
STEPS, STARTS = 100, 12  # every (recompute, ZeRO) combination gets a start on each process


def main(problem_path: str, out_path: str) -> None:
    import jax

    # CPU collectives across processes: gloo (jax's default on CPU since 0.4.3x), set here so
    # that a changed default cannot silently turn the all-gathers into errors.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_num_cpu_devices", 2)
    jax.config.update("jax_enable_x64", True)

    import numpy as np

    import codesign.search._optimize as optimize_module
    from codesign.cli import main as cli_main
    from codesign.search import Settings, distributed_sweep, load_problem, optimize

    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        rc = cli_main(
            [
                "sweep",
                problem_path,
                "--json",
                "--distributed",
                "--no-compile-cache",
                "--top-k",
                str(TOP_K),
            ]
        )
    assert jax.process_count() == 2, jax.process_count()

    pb = load_problem(problem_path)
    sw = distributed_sweep(pb, top_k=TOP_K, progress=False, distributed=True)

    merges = []
    real_allgather = optimize_module.allgather_best

    def recording_allgather(*local):
        merged = real_allgather(*local)
        merges.append({"local": list(local), "merged": list(merged)})
        return merged

    optimize_module.allgather_best = recording_allgather
    res = optimize(pb, Settings(steps=STEPS, starts=STARTS), seed=0, distributed=True)

    out = {
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "local_devices": len(jax.local_devices()),
        "cli_rc": rc,
        "cli_stdout": stdout.getvalue(),
        "sweep": {
            "num_points": sw.num_points,
            "num_valid": sw.num_valid,
            "num_feasible": sw.num_feasible,
            "best_values": [float(v) for v in sw.best_values],
            "best_indices": [int(i) for i in sw.best_indices],
            "profiles": {k: [float(v) for v in p] for k, p in sw.profiles.items()},
        },
        "optimize": {
            "exact_objective": res.exact_objective,
            "relaxed_objective": res.relaxed_objective,
            "num_exact_evals": res.num_exact_evals,
            "point": {k: (v if isinstance(v, str) else float(v)) for k, v in res.point.items()},
            "report_step_time_s": float(res.report.step_time_s) if res.report is not None else None,
            "first_losses": np.asarray(res.history)[:, 0].tolist(),
        },
        "merges": merges,
    }
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
