"""Two real processes on localhost (``jax.distributed``, CPU collectives over gloo): the sweep's
and the optimizer's merges across processes, and ``codesign sweep --distributed``.

Each process is ``tests/distributed_worker.py`` on 2 CPU devices of its own; the coordinator
is ``127.0.0.1`` on a free port.  Both processes get a deadline, and one failing kills the
other, so a hung collective fails the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import pytest
from distributed_worker import STARTS, TOP_K

from codesign.search import config_at, distributed_sweep, exact_objective, load_problem

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "distributed_worker.py"
PROBLEM = ROOT / "experiments" / "problems" / "llama3-8b-64xh100-step.toml"  # 1,152 points
TIMEOUT_S = 300.0

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_two_processes(tmp_path: Path) -> list[dict]:
    port = _free_port()
    procs, logs = [], []
    for rank in range(2):
        env = {
            **os.environ,
            "JAX_PLATFORMS": "cpu",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "CODESIGN_COORDINATOR": f"127.0.0.1:{port}",
            "CODESIGN_NUM_PROCESSES": "2",
            "CODESIGN_PROCESS_ID": str(rank),
        }
        env.pop("XLA_FLAGS", None)
        log = open(tmp_path / f"rank{rank}.log", "w")  # noqa: SIM115  (closed below)
        logs.append(log)
        cmd = [sys.executable, str(WORKER), str(PROBLEM), str(tmp_path / f"rank{rank}.json")]
        procs.append(subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + TIMEOUT_S
    failure = None
    try:
        while any(p.poll() is None for p in procs):
            bad = [r for r, p in enumerate(procs) if p.returncode not in (None, 0)]
            if bad:
                failure = f"process {bad[0]} exited with status {procs[bad[0]].returncode}"
                break
            if time.monotonic() > deadline:
                failure = f"timed out after {TIMEOUT_S:.0f} s (a hung collective?)"
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for log in logs:
            log.close()
    if failure is None and any(p.returncode for p in procs):
        failure = f"exit statuses {[p.returncode for p in procs]}"
    if failure:
        tails = "\n".join(
            f"--- rank {r} ---\n{(tmp_path / f'rank{r}.log').read_text()[-3000:]}" for r in range(2)
        )
        pytest.fail(f"two-process run: {failure}\n{tails}", pytrace=False)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    return _run_two_processes(tmp_path_factory.mktemp("distributed"))


@pytest.fixture(scope="module")
def problem():
    return load_problem(PROBLEM)


@pytest.fixture(scope="module")
def single(problem):
    """The single-process sweep on this process's 4 CPU devices."""
    assert jax.process_count() == 1
    return distributed_sweep(problem, top_k=TOP_K, progress=False)


def test_two_processes_ran(ranks):
    assert [r["process_index"] for r in ranks] == [0, 1]
    assert all(r["process_count"] == 2 and r["local_devices"] == 2 for r in ranks)


def test_sweep_equals_the_single_process_sweep(ranks, single):
    """Every process holds the global result, equal to one process's sweep of the whole grid:
    the top-k (values and flat indices), the counts and every per-axis profile."""
    for r in ranks:
        s = r["sweep"]
        assert (s["num_points"], s["num_valid"], s["num_feasible"]) == (
            single.num_points,
            single.num_valid,
            single.num_feasible,
        )
        assert s["best_values"] == [float(v) for v in single.best_values]
        assert s["best_indices"] == [int(i) for i in single.best_indices]
        assert s["profiles"] == {k: [float(v) for v in p] for k, p in single.profiles.items()}
    assert single.num_points == 1152 and 0 < single.num_feasible < single.num_valid


def test_cli_sweep_prints_once_the_single_process_result(ranks, single):
    """``codesign sweep --distributed``: process 0 prints the global result, process 1 nothing."""
    assert [r["cli_rc"] for r in ranks] == [0, 0]
    assert ranks[1]["cli_stdout"] == ""
    out = ranks[0]["cli_stdout"]
    d = json.loads(out[out.index("{") :])
    assert d["objective_value"] == float(single.best_values[0])
    assert (d["num_exact_evals"], d["num_valid"], d["num_feasible"]) == (
        single.num_points,
        single.num_valid,
        single.num_feasible,
    )
    assert [t["objective"] for t in d["top"]] == [float(v) for v in single.best_values]
    assert [t["point"] for t in d["top"]] == [
        {k: (v if isinstance(v, str) else float(v)) for k, v in single.point(i).items()}
        for i in range(len(single.best_values))
    ]


def test_optimizer_merge_across_processes(ranks, problem, single):
    """Each process ran its own starts (different keys), the all-gather picked the best of
    the processes' own results, summed their exact evaluations, and both processes return
    the same design, whose exact objective is what the model gives at that point."""
    first = [r["optimize"]["first_losses"] for r in ranks]
    assert len(first[0]) == len(first[1]) == STARTS and first[0] != first[1]
    assert all(len(r["merges"]) == 1 for r in ranks)
    local = [r["merges"][0]["local"] for r in ranks]  # (point, value, evaluations, relaxed)
    merged = ranks[0]["merges"][0]["merged"]
    assert ranks[1]["merges"][0]["merged"] == merged
    best = min(range(2), key=lambda i: local[i][1])
    assert merged[1] == min(v for _, v, _, _ in local)  # no worse than either process alone
    assert merged[0] == local[best][0] and merged[3] == local[best][3]
    assert merged[2] == local[0][2] + local[1][2]

    opt = [r["optimize"] for r in ranks]
    assert opt[0] == {**opt[1], "first_losses": opt[0]["first_losses"]}
    o = opt[0]
    assert (o["exact_objective"], o["num_exact_evals"], o["relaxed_objective"]) == (
        merged[1],
        merged[2],
        merged[3],
    )
    assert o["report_step_time_s"] == pytest.approx(o["exact_objective"], rel=1e-12)
    cfg = config_at(problem.cfg, o["point"])
    assert exact_objective(cfg, problem.objective) == pytest.approx(o["exact_objective"], rel=1e-12)
    # The merged design is a grid point: never better than the exhaustive optimum.
    assert o["exact_objective"] >= float(single.best_values[0]) * (1 - 1e-12)
