"""The tornado chart of a sensitivity analysis.

Its largest elasticities, a kink drawn with both one-sided values (the tornado diagram of Eschenbach, *Interfaces* 22(6), 1992, with
elasticities ``d ln f / d ln p`` in place of swings; matplotlib imported when called)."""

from __future__ import annotations

from codesign.sensitivity._elasticity import OBJECTIVES
from codesign.sensitivity._figures import _new_axes
from codesign.specs import SpecError

__all__ = ["tornado_rows", "plot_tornado"]


def tornado_rows(sens, objective: str = "time_to_train", n: int = 15) -> list[dict]:
    """The rows of :func:`plot_tornado`, largest first: ``{parameter, label, status,
    elasticity, left, right}`` for the ``n`` largest elasticities of ``objective``
    (:meth:`~codesign.sensitivity.Sensitivity.ranked`)."""
    if objective not in sens.objectives:
        raise SpecError("tornado objective", objective, f"one of {list(sens.objectives)}")
    labels = {p.name: p.label for p in sens.parameters}
    return [
        {
            "parameter": e.parameter,
            "label": labels.get(e.parameter, e.parameter),
            "status": e.status,
            "elasticity": e.elasticity,
            "left": e.left,
            "right": e.right,
        }
        for e in sens.ranked(objective, n)
    ]


def plot_tornado(sens, objective: str = "time_to_train", n: int = 15, ax=None):
    """Horizontal bars of the ``n`` largest elasticities ``d ln f / d ln p`` of ``objective``
    in a :class:`~codesign.sensitivity.Sensitivity`, strategy fixed, largest at the top.

    A smooth parameter gets one bar at its derivative, a discrete one (accelerator count,
    layers, batch, ...) one hatched bar at its arc elasticity; at a kink the two one-sided
    elasticities are drawn as two thin bars (the left one above, the right one below, hatched
    differently) labelled "kink"; an undefined elasticity has no bar.  Red: ``f`` grows with
    the parameter; blue: it falls.
    """
    rows = tornado_rows(sens, objective, n)
    fig, ax = _new_axes(ax, (7.5, 0.9 + 0.32 * max(len(rows), 1)))
    colour = lambda v: "tab:red" if v > 0 else "tab:blue"
    ticks, names = [], []
    for k, r in enumerate(rows):
        y = len(rows) - 1 - k
        ticks.append(y)
        names.append(r["label"])
        if r["status"] == "kink":
            for v, dy, hatch, side in (
                (r["left"], 0.17, "\\\\", "left"),
                (r["right"], -0.17, "//", "right"),
            ):
                if v is not None:
                    ax.barh(y + dy, v, height=0.3, color=colour(v), alpha=0.7, hatch=hatch)
                    ax.annotate(
                        side,
                        (v, y + dy),
                        xytext=(3 if v >= 0 else -3, 0),
                        textcoords="offset points",
                        ha="left" if v >= 0 else "right",
                        va="center",
                        fontsize=6,
                    )
            ax.annotate(
                "kink",
                (0, y),
                xytext=(-4 if (r["left"] or 0) + (r["right"] or 0) >= 0 else 4, 0),
                textcoords="offset points",
                ha="right" if (r["left"] or 0) + (r["right"] or 0) >= 0 else "left",
                va="center",
                fontsize=7,
                style="italic",
            )
        elif r["elasticity"] is not None:
            v = r["elasticity"]
            ax.barh(
                y,
                v,
                height=0.6,
                color=colour(v),
                hatch="..." if r["status"] == "discrete" else None,
                alpha=0.85,
            )
            ax.annotate(
                f"{v:+.3g}",
                (v, y),
                xytext=(3 if v >= 0 else -3, 0),
                textcoords="offset points",
                ha="left" if v >= 0 else "right",
                va="center",
                fontsize=7,
            )
        else:
            ax.annotate(
                "undefined",
                (0, y),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize=7,
                style="italic",
            )
        if r["status"] == "discrete":
            names[-1] += " (arc)"
    ax.axvline(0.0, color="k", lw=0.8)
    ax.set_yticks(ticks, names, fontsize=8)
    ax.set_ylim(-0.7, max(len(rows), 1) - 0.3)
    ax.margins(x=0.15)
    ax.set_xlabel("elasticity d ln f / d ln p")
    unit = OBJECTIVES.get(objective, ("",))[0]
    val = sens.values.get(objective)
    at = f" = {val:.4g} {unit}" if val is not None else ""
    ax.set_title(f"{objective.replace('_', ' ')}{at}: elasticities, strategy fixed", fontsize=9)
    ax.grid(True, axis="x", lw=0.3)
    return fig
