"""The app's charts (altair specs built from library results; no data access): the Metrics
page's metric-vs-k curve with CI bands and the Judge page's dot-and-whisker agreement chart."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from labeler import agreement


def metric_curve(curve: pd.DataFrame) -> alt.LayerChart:
    """Each metric's mean at each k as a line with its 95% CI as a band of the same hue
    (``Report.curve()``: metric, k, mean, ci_low, ci_high, n); a categorical palette."""
    curve = curve.dropna(subset=["mean"])
    # a categorical palette: each metric its own hue, its 95% CI a band of the same hue
    colour = alt.Color("metric:N", title="metric", scale=alt.Scale(scheme="tableau10"),
                       legend=alt.Legend(symbolOpacity=1))
    base = alt.Chart(curve).encode(x=alt.X("k:Q", title="k"), color=colour)
    band = base.mark_area(opacity=0.18).encode(
        y=alt.Y("ci_low:Q", title="mean (band: 95% CI)", scale=alt.Scale(domain=[0, 1])), y2="ci_high:Q")
    line = base.mark_line(point=True).encode(
        y=alt.Y("mean:Q", scale=alt.Scale(domain=[0, 1])),
        tooltip=["metric", "k", alt.Tooltip("mean:Q", format=".3f"), alt.Tooltip("ci_low:Q", format=".3f"),
                 alt.Tooltip("ci_high:Q", format=".3f"), "n"])
    return band + line


def agreement_whiskers(a: agreement.Agreement, gate_settings: dict[str, Any]) -> alt.LayerChart | None:
    """Dot and whisker per statistic: the judge's value and 95% CI next to the human-human
    ceiling's, with the gate's bar on the statistic it checks. Bias (grade steps, not a -1..1
    scale) and undefined values stay in the table only."""
    who = ["judge vs humans", "human-human (ceiling)", "gate's bar"]
    rows = []
    for name, stat in a.statistics.items():
        if name in ("confusion_matrix", "bias"):
            continue
        for label, s in ((who[0], stat), (who[1], a.human_human.get(name))):
            if s is not None and s.value is not None:
                rows.append({"statistic": agreement.display_name(name), "who": label, "value": float(s.value),
                             "ci_low": s.ci_low if s.ci_low is not None else float(s.value),
                             "ci_high": s.ci_high if s.ci_high is not None else float(s.value)})
    if not rows:
        return None
    frame = pd.DataFrame(rows)
    order = list(dict.fromkeys(frame["statistic"]))
    gated = agreement.display_name(gate_settings["statistic"])
    bars = pd.DataFrame([{"statistic": gated, "who": who[2], "value": float(gate_settings["min_value"]),
                          "ci_low": float(gate_settings["min_ci_low"])}])
    scale = alt.Scale(domain=[min(0.0, float(frame["ci_low"].min())), 1])
    y = alt.Y("statistic:N", sort=order, title=None, axis=alt.Axis(labelLimit=220))
    colour = alt.Color("who:N", title=None, scale=alt.Scale(domain=who, range=["#4c78a8", "#f58518", "#e45756"]),
                       legend=alt.Legend(orient="top"))
    tooltip = ["statistic", "who", alt.Tooltip("value:Q", format=".3f"), alt.Tooltip("ci_low:Q", format=".3f"),
               alt.Tooltip("ci_high:Q", format=".3f")]
    base = alt.Chart(frame).encode(y=y, yOffset=alt.YOffset("who:N", sort=who[:2]), color=colour)
    whisker = base.mark_rule(strokeWidth=2).encode(x=alt.X("ci_low:Q", scale=scale, title="value (whiskers: 95% CI)"),
                                                  x2="ci_high:Q")
    dot = base.mark_point(filled=True, size=70, opacity=1).encode(x=alt.X("value:Q", scale=scale), tooltip=tooltip)
    bar = alt.Chart(bars).mark_tick(thickness=3, size=26).encode(
        x=alt.X("value:Q", scale=scale), y=alt.Y("statistic:N", sort=order), color=colour,
        tooltip=["statistic", alt.Tooltip("value:Q", title="gate: at least", format=".2f"),
                 alt.Tooltip("ci_low:Q", title="gate: CI lower bound at least", format=".2f")])
    return (whisker + dot + bar).properties(height=alt.Step(14))
