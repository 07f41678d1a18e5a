"""A job's step over its sites: each site's view, then the data- or pipeline-parallel whole."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from codesign import pipeline
from codesign._compile import jit
from codesign.collectives import tier_bytes_per_s
from codesign.compute import peak_flops
from codesign.cost import CLUSTER_COST_KEYS, cluster_cost, to_train, tokens_to_train
from codesign.goodput import checkpoint_size_bytes, fleet_failures, job_goodput
from codesign.sites._spec import (
    DP_OUTERMOST,
    Sites,
    SitesReport,
    _check,
    _replace,
    _with_needed_parts,
)
from codesign.smoothing import EXACT, Smoothing, safe_div
from codesign.specs import Model, System
from codesign.step import Report, evaluate_unchecked
from codesign.workload import model_flops_per_step, total_params


def _per_layer_kinds(model: Model, layers) -> Model:
    """``model`` cut to ``layers`` consecutive layers: the MoE, Mamba, windowed and MLP-free
    layer counts scale in proportion (an average slice of the layer pattern)."""
    frac = safe_div(layers, model.layers)
    return _replace(
        model,
        layers=layers,
        moe_layers=model.moe_layers * frac,
        mamba_layers=model.mamba_layers * frac,
        window_layers=model.window_layers * frac,
        mlp_free_layers=model.mlp_free_layers * frac,
    )


def _dp_view(job: Sites, i: int, share) -> tuple:
    """Site ``i``'s view of a data-parallel job: ``S`` copies of it joined by the link, dp
    outermost (the single-site model's hierarchical reduction: inside the site, then over
    the link)."""
    s, n_sites = job.sites[i], float(len(job.sites))
    n = s.system.num_accelerators
    link = _replace(job.link, domain=n_sites * n, cross_site=1.0)
    system = _replace(s.system, num_accelerators=n_sites * n, tiers=(*s.system.tiers, link))
    strategy = _replace(s.strategy, dp=n_sites * s.strategy.dp, placement=DP_OUTERMOST)
    training = _replace(job.training, global_batch=n_sites * share)
    return job.model, training, system, strategy, s.efficiency


def _pp_view(job: Sites, i: int, share) -> tuple:
    """Site ``i`` alone with its ``share`` layers (the output layer on the last site only; the
    first site's input embedding is added to its memory in :func:`site_parts`)."""
    s = job.sites[i]
    model = _per_layer_kinds(job.model, share)
    if i < len(job.sites) - 1:
        model = _replace(model, vocab=0.0 * model.vocab)
    return model, job.training, s.system, s.strategy, s.efficiency


def site_parts(job: Sites, i: int, share, sm: Smoothing) -> dict:
    """Site ``i``'s figures at ``share`` (vmappable over ``share``)."""
    view = _dp_view if job.across == "dp" else _pp_view
    r: Report = evaluate_unchecked(*view(job, i, share), sm)
    b = r.breakdown_s
    n_mb = r.num_microbatches
    inside = ("forward", "backward", "recompute", "tp_comm", "cp_comm", "ep_comm", "offload")
    mem = r.memory_gb["total"]
    if job.across == "pp" and i == 0 and len(job.sites) > 1:
        # The input embedding (vocab-parallel over tp) on the first site, at the site's
        # memory per local parameter (weights, gradients and optimizer state).
        mg, pr = r.memory_gb, r.params
        gb_per_param = safe_div(
            mg["weights"] + mg["gradients"] + mg["optimizer"],
            pr["local_dense"] + pr["local_expert"],
        )
        mem = mem + gb_per_param * job.model.vocab * job.model.hidden / job.sites[0].strategy.tp
    return {
        "step": r.step_time_s,
        "per_mb": safe_div(sum(b[k] for k in inside), n_mb),
        "dp": b["dp_comm"],
        "opt": b["optimizer"] + b["overhead"],
        "n_mb": n_mb,
        "mem": mem,
        "act": r.memory_gb["activations"],
        "hbm": job.sites[i].system.accelerator.hbm_gb + 0.0 * share,
    }


def _link_delay_s(job: Sites, a: int, b: int):
    """One-way time of one micro-batch's activations from site ``a`` to site ``b``: the
    ``b s h / (tp cp)`` half-precision shard of each rank, as in the single-site model's
    point-to-point (:mod:`codesign.pipeline`), for the smaller ``tp`` of the two sides,
    over one accelerator's share of the link."""
    m = job.model
    st_a, st_b = job.sites[a].strategy, job.sites[b].strategy
    tp = jnp.minimum(st_a.tp, st_b.tp)
    nbytes = 2.0 * st_a.microbatch * m.seq_len * m.hidden / (tp * st_a.cp)
    return job.link.latency_us * 1e-6 + safe_div(nbytes, tier_bytes_per_s(job.link))


def _stack(xs):
    return jnp.stack(jnp.broadcast_arrays(*xs))


def _smax(sm: Smoothing, xs):
    return sm.max(*xs) if len(xs) > 1 else xs[0]


def combine(job: Sites, parts: list[dict], shares: list, sm: Smoothing) -> dict:
    """The job's figures from its sites' (arrays broadcast over any leading axes)."""
    n_sites = len(job.sites)
    if job.across == "dp":
        busy = [p["step"] for p in parts]
        step = _smax(sm, busy)
        link_exposed = _smax(sm, [p["dp"] for p in parts])
        mem = [p["mem"] for p in parts]
        extra = jnp.zeros((0,))
        # Every site at its own pace, none waiting: the shares' summed rates.
        ideal = safe_div(
            sum(shares), sum(safe_div(sh, t) for sh, t in zip(shares, busy, strict=True))
        )
    else:
        stages = [s.strategy.pp for s in job.sites]
        total_stages = sum(stages)
        t = [p["per_mb"] for p in parts]
        t_max = _smax(sm, t)
        n_mb = parts[-1]["n_mb"]
        delays = [_link_delay_s(job, i, i + 1) for i in range(n_sites - 1)]
        cycle, extras, mem, offset = t_max, [], [], 0.0
        for i in range(n_sites):
            if i < n_sites - 1:
                # Stage k, the last of site i: W = P - k micro-batches in flight for a round
                # trip R_k + 2 delta (R_k: stages k.. forward and backward).
                k = offset + stages[i] - 1.0
                rtt = t[i] + sum(stages[j] * t[j] for j in range(i + 1, n_sites))
                rtt = rtt + 2.0 * sum(delays[i:])
                window = total_stages - k
                if job.schedule == "crosspipe":
                    e = sm.relu(sm.ceil(safe_div(rtt, t_max) - window - 1e-9), scale=1.0)
                    e = sm.min(e, sm.relu(n_mb - window, scale=1.0))
                else:
                    e = 0.0 * t_max
                extras.append(e)
                cycle = sm.max(cycle, safe_div(rtt, window + e))
            # Memory: the site's first stage holds P - offset (+ the extra warm-up of every
            # boundary after it) micro-batches, not the pp_i of the site alone.
            local = pipeline.in_flight_chunks(0.0, stages[i], 1.0, n_mb, sm)
            held = sm.min(total_stages - offset + sum(extras[i:]), n_mb)
            p = parts[i]
            mem.append(p["mem"] + p["act"] * (safe_div(held, local) - 1.0))
            offset = offset + stages[i]
        fill = sum(s * ti for s, ti in zip(stages, t, strict=True)) + 2.0 * sum(delays)
        dp_opt = _smax(sm, [p["dp"] + p["opt"] for p in parts])
        step = (n_mb - 1.0) * cycle + fill + dp_opt
        busy = [n_mb * ti + p["dp"] + p["opt"] for ti, p in zip(t, parts, strict=True)]
        link_exposed = (n_mb - 1.0) * (cycle - t_max) + 2.0 * sum(delays)
        extra = _stack(extras) if extras else jnp.zeros((0,))
        # Every stage at the average pace, no link: (m - 1) t_avg + sum_j t_j + reductions.
        work = sum(s * ti for s, ti in zip(stages, t, strict=True))
        ideal = (n_mb - 1.0) * safe_div(work, total_stages) + work + dp_opt
    busy_a, mem_a = _stack(busy), _stack(mem)
    site_fits = mem_a <= _stack([p["hbm"] for p in parts])
    return {
        "step": step,
        "busy": busy_a,
        "idle": 1.0 - safe_div(busy_a, step),
        "balance_loss": 1.0 - safe_div(ideal, step),
        "mem": mem_a,
        "site_fits": site_fits,
        "fits": jnp.all(site_fits, axis=0),
        "link_exposed": link_exposed,
        "extra": extra,
    }


def _site_system_with_link(job: Sites, i: int) -> System:
    s = job.sites[i]
    return _replace(s.system, tiers=(*s.system.tiers, _replace(job.link, cross_site=1.0)))


def _costs(job: Sites, step, sm: Smoothing) -> dict:
    """Costs summed over the sites (each with its link ports, storage and hot spares); DiLoCo's
    tokens penalty as in the single-site model; the goodput of the whole job
    (:func:`codesign.goodput.job_goodput`: a failure at any site interrupts every site, site
    0's reliability gives the restart and checkpoint policy)."""
    tr = job.training
    tokens_step = tr.global_batch * job.model.seq_len
    tokens = tokens_to_train(tr, job.sites[0].strategy, sm)
    per = [
        cluster_cost(_site_system_with_link(job, i), step, tokens_step, tokens)
        for i in range(len(job.sites))
    ]
    # Money and power add over the sites; the rest is the job's.
    out = {k: sum(c[k] for c in per) if k in _ADDITIVE else per[0][k] for k in per[0]}
    fleets = []
    for s in job.sites:
        sy, st = s.system, s.strategy
        n = sy.num_accelerators
        fleets.append(
            fleet_failures(
                sy.reliability,
                n,
                sy.accelerator.host_link_gbps,
                jnp.minimum(sy.tiers[0].domain, n),
                st.tp * st.pp * st.cp,
            )
        )
    ckpt_bytes = checkpoint_size_bytes(
        total_params(job.model)["total"], job.training.optimizer_state_bytes
    )
    g = job_goodput(job.sites[0].system.reliability, fleets, ckpt_bytes)
    out.update(g)
    out.update(
        to_train(
            step, tokens_step, tokens, g["goodput"], out["usd_per_step"], out["energy_kwh_per_step"]
        )
    )
    return out


_ADDITIVE = (*CLUSTER_COST_KEYS, "storage_capex_usd", "spare_capex_usd")
"""Money and power add over the sites."""


def _homogeneous_step(job: Sites, i: int, sm: Smoothing):
    """Step of a single-site cluster of site ``i``'s type with the job's total peak FLOP/s,
    the site's inner strategy and the whole job (``dp`` scaled to the accelerator count;
    ``pp``: the job's total stage count)."""
    s = job.sites[i]
    prec = job.training.precision
    total = sum(x.system.num_accelerators * peak_flops(x.system, prec) for x in job.sites)
    n = total / peak_flops(s.system, prec)
    st = s.strategy
    pp = st.pp if job.across == "dp" else sum(x.strategy.pp for x in job.sites)
    strategy = _replace(st, pp=pp, dp=n / (st.tp * pp * st.cp))
    last = s.system.tiers[-1]
    tiers = (*s.system.tiers[:-1], _replace(last, domain=n))
    system = _replace(s.system, num_accelerators=n, tiers=tiers)
    r = evaluate_unchecked(job.model, job.training, system, strategy, s.efficiency, sm)
    return r.step_time_s


def evaluate_sites(job: Sites, smoothing: Smoothing = EXACT, homogeneous: bool = True):
    """The step of a job over its sites at their ``share`` s (:class:`SitesReport`).

    Checked (:class:`~codesign.specs.SpecError`), then jit-compiled once per structure;
    ``homogeneous=False`` skips the homogeneous reference clusters (``vs_homogeneous`` is
    then 1).  :func:`evaluate_sites_unchecked` is the same under jit, vmap and grad (relaxed
    with ``smoothing``).
    """
    _check(job)
    job = _with_needed_parts(job)
    return _evaluate_jit(job, smoothing, homogeneous)


def evaluate_sites_unchecked(job: Sites, smoothing: Smoothing = EXACT, homogeneous: bool = True):
    """:func:`evaluate_sites` without the checks (traceable)."""
    sm = smoothing
    shares = [s.share for s in job.sites]
    parts = [site_parts(job, i, shares[i], sm) for i in range(len(job.sites))]
    c = combine(job, parts, shares, sm)
    step = c["step"]
    if homogeneous:
        vs = safe_div(step, _stack([_homogeneous_step(job, i, sm) for i in range(len(parts))]))
    else:
        vs = jnp.ones((len(job.sites),))
    prec = job.training.precision
    peak = sum(s.system.num_accelerators * peak_flops(s.system, prec) for s in job.sites)
    flops = model_flops_per_step(job.model, job.training.global_batch)
    return SitesReport(
        step_time_s=step,
        site_busy_s=c["busy"],
        idle_fraction=c["idle"],
        balance_loss=c["balance_loss"],
        vs_homogeneous=vs,
        memory_gb=c["mem"],
        site_fits=c["site_fits"],
        fits=c["fits"],
        link_exposed_s=c["link_exposed"],
        extra_warmup=c["extra"],
        tokens_per_s=safe_div(job.training.global_batch * job.model.seq_len, step),
        mfu=safe_div(flops, step * peak),
        cost=_costs(job, step, sm),
        shares=_stack([jnp.asarray(x, dtype=float) for x in shares]),
    )


_evaluate_jit = jit(evaluate_sites_unchecked, static_argnums=(2,))


@functools.partial(jit, static_argnums=(1,))
def site_table(job: Sites, i: int, shares):
    """:func:`site_parts` of site ``i`` at each of ``shares`` (exact; one compiled program per
    structure and length)."""
    return jax.vmap(lambda sh: site_parts(job, i, sh, EXACT))(shares)
