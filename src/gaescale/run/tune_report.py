"""The report of a ``gaescale tune`` search: its trials as a table and a plot of validation AUC per trial."""
from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..outputs import atomic_write
from .report import BLUE, GREY, ORANGE, STYLE, figure, html_table, png


def trials_table(study) -> list[dict[str, Any]]:
    """One row per trial: ``number``, ``state`` (complete, pruned, fail, running), ``val_auc`` (the kept weights'
    for a complete trial, the last reported for a pruned one), ``best_epoch``, ``seconds`` and ``params``."""
    rows = []
    for t in study.trials:
        last = t.intermediate_values[max(t.intermediate_values)] if t.intermediate_values else None
        rows.append({"number": t.number, "state": t.state.name.lower(),
                     "val_auc": t.value if t.value is not None else last,
                     "best_epoch": t.user_attrs.get("best_epoch"),
                     "seconds": t.user_attrs.get("seconds") or (t.duration.total_seconds() if t.duration else None),
                     "params": dict(t.params)})
    return rows


def _plot(table: list[dict[str, Any]]) -> bytes:
    fig, ax = figure()
    for state, colour, label in (("complete", BLUE, "complete"), ("pruned", ORANGE, "pruned (last reported)")):
        pts = [(r["number"], r["val_auc"]) for r in table if r["state"] == state and r["val_auc"] is not None]
        if pts:
            ax.scatter(*zip(*pts), color=colour, s=18, label=label, zorder=3)
    done = [(r["number"], r["val_auc"]) for r in table if r["state"] == "complete"]
    if done:
        x, y = zip(*done)
        ax.step(x, np.maximum.accumulate(y), where="post", color=GREY, linewidth=1.2, label="best so far")
    ax.set(xlabel="trial", ylabel="validation AUC", title="Validation AUC of each trial")
    ax.legend(frameon=False, loc="lower right")
    return png(fig)


def write_tune_report(out: Path, table: list[dict[str, Any]], best_value: float | None) -> Path:
    """``out/trials.png`` and ``out/report.html`` (the trials best first, their options, the plot)."""
    png = _plot(table)
    atomic_write(out / "trials.png", lambda fh: fh.write(png))
    order = sorted(table, key=lambda r: (r["state"] != "complete", -(r["val_auc"] or 0.0)))
    rows = [(r["number"], r["state"], "n/a" if r["val_auc"] is None else f"{r['val_auc']:.4f}",
             "" if r["best_epoch"] is None else r["best_epoch"],
             "" if r["seconds"] is None else f"{r['seconds']:.1f}", json.dumps(r["params"], sort_keys=True))
            for r in order]
    uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    best = "no trial completed yet" if best_value is None else f"best validation AUC {best_value:.4f} (best.json)"
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>gaescale tune: {html.escape(out.name)}</title>
<style>{STYLE}</style></head><body><main>
<h1>Hyperparameter search</h1>
<p class="sub">{html.escape(str(out))} &middot; {len(table)} trials &middot; {html.escape(best)}</p>
<div class="card"><figure><img src="{uri}" alt="trials.png"><figcaption>Validation AUC of each trial; pruned
trials at their last reported epoch. The test split was never scored.</figcaption></figure></div>
<h2>Trials</h2><div class="card">{html_table(rows, ("trial", "state", "val AUC", "best epoch", "seconds", "options"),
                                          (0, 2, 3, 4))}</div>
<footer>Written by gaescale {html.escape(__version__)}; the same table is in trials.csv.</footer>
</main></body></html>
"""
    return atomic_write(out / "report.html", lambda fh: fh.write(page.encode()))
