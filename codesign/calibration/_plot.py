"""The parity plot: predicted against measured step time, before and after calibration.

:func:`parity_figure` returns a :class:`matplotlib.figure.Figure` (matplotlib is imported
when it is called, not with this module); the caller saves it.
"""

from __future__ import annotations

import numpy as np

from codesign.calibration._stats import group_order

__all__ = ["parity_figure"]


def parity_figure(res: dict):
    """Predicted against measured step time, log-log, one colour per source.

    Three panels: before calibration; after, random split (filled: training, open:
    held out); after, each source predicted by the fit that did not see it.
    """
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    pts = res["points"]
    meas = np.array([p["measured_s"] for p in pts])
    groups = group_order(res)
    grp = np.array([p["group"] for p in pts])
    colors = dict(zip(groups, colormaps["tab10"].colors, strict=False))
    rand = next((s for s in res["splits"] if s["kind"] == "random"), None)
    loso = np.full(len(pts), np.nan)
    for sp in res["splits"]:
        if sp["kind"] == "source":
            m = np.array([p["source"] == sp["held_source"] for p in pts])
            loso[m] = np.array(sp["after_s"])[m]
    panels = [
        ("before calibration (Efficiency() defaults)", np.array([p["before_s"] for p in pts]), None)
    ]
    if rand is not None:
        panels.append((f"after, {rand['name']}", np.array(rand["after_s"]), np.array(rand["held"])))
    if np.isfinite(loso).any():
        panels.append(
            ("after, each source held out (fit on the others)", loso, np.ones(len(pts), bool))
        )
    fig = Figure(figsize=(5.2 * len(panels), 5.0))
    axes = fig.subplots(1, len(panels), squeeze=False)
    lo, hi = meas.min() / 2, meas.max() * 2
    for ax, (title, pred, held) in zip(axes[0], panels, strict=True):
        ax.plot([lo, hi], [lo, hi], color="k", lw=0.8)
        for f in (0.9, 1.1):
            ax.plot([lo, hi], [lo * f, hi * f], color="grey", lw=0.5, ls="--")
        for g in groups:
            m = (grp == g) & np.isfinite(pred)
            if not m.any():
                continue
            if held is None:
                ax.scatter(meas[m], pred[m], s=14, color=colors[g], label=g)
            else:
                mt, mh = m & ~held, m & held
                if mt.any():
                    ax.scatter(meas[mt], pred[mt], s=14, color=colors[g], label=f"{g} (train)")
                if mh.any():
                    ax.scatter(
                        meas[mh],
                        pred[mh],
                        s=22,
                        facecolors="none",
                        edgecolors=colors[g],
                        label=f"{g} (held out)",
                    )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured step time (s)")
        ax.set_ylabel("predicted step time (s)")
        ax.set_title(title, fontsize=9)
        ax.grid(True, which="both", lw=0.3)
        ax.legend(fontsize=6, loc="upper left")
    fig.suptitle("codesign step-time model vs published runs (dashed: +/-10 %)", fontsize=10)
    fig.tight_layout()
    return fig
