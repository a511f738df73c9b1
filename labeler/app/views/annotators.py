"""Annotators (lead): speed, agreement, skips and flags per person, the table a lead coaches with."""

import streamlit as st

from labeler.app import auth, state
from labeler.labels import coaching

db = state.get_db()
auth.require_lead("The Annotators page")

st.title("Annotators")
idle = st.number_input("A gap longer than this many minutes is a break", min_value=1, max_value=240, value=10,
                       step=1, key="annotators_idle",
                       help="Breaks count neither as time nor as an item in items per hour, and items left "
                            "open longer than this are left out of the median seconds per item")


def _kappa(rec: dict, prefix: str) -> str:
    value = rec[prefix]
    if value is None:
        reason = rec[f"{prefix}_reason"] or "undefined"
        return f"- (n={rec[f'{prefix}_n']})" if reason.startswith("fewer than") else f"- ({reason})"
    if rec[f"{prefix}_low"] is None:
        return f"{value:.2f} (n={rec[f'{prefix}_n']})"
    return f"{value:.2f} [{rec[f'{prefix}_low']:.2f}, {rec[f'{prefix}_high']:.2f}] (n={rec[f'{prefix}_n']})"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


rows = coaching.annotator_performance(db, idle_minutes=float(idle))
if not rows:
    st.info("No annotators yet: they appear when they sign in.")
    st.stop()
st.dataframe([{
    "annotator": r["annotator"], "role": r["role"] or "", "finished": r["finished"], "submitted": r["submitted"],
    "items per hour": "-" if r["items_per_hour"] is None else f"{r['items_per_hour']:.1f}",
    "median s per item": "-" if r["median_item_seconds"] is None else f"{r['median_item_seconds']:.0f} (of {r['timed']})",
    "skipped": _share(r["skip_share"]), "flagged": _share(r["flag_share"]),
    "kappa vs consolidated": _kappa(r, "kappa_consolidated"),
    "kappa vs others": _kappa(r, "kappa_others"),
} for r in rows], hide_index=True, key="annotators_table")
st.caption(
    "Items per hour: from the times items were finished; a gap longer than the break limit is not counted. "
    "Median seconds: the time the Label page measured per submitted item, items with no time (imports) or "
    "more than the break limit left out. Kappa: Cohen's kappa (unweighted) with a 95% bootstrap interval over "
    "items, on items two or more people submitted; '-' when fewer than 10 chunk pairs. Skipped and flagged: "
    "shares of the items they finished.")

st.subheader("Each pair of annotators")
pairs = coaching.pairwise_agreement(db)
if not pairs:
    st.caption("No two annotators submitted the same item yet (raise the overlap in Settings).")
else:
    st.dataframe([{"annotators": f"{p['first']} / {p['second']}", "chunk pairs": p["n"],
                   "Cohen's kappa": _kappa({"k": p["kappa"], "k_low": p["kappa_low"], "k_high": p["kappa_high"],
                                            "k_n": p["n"], "k_reason": p["reason"]}, "k")}
                  for p in pairs], hide_index=True, key="annotators_pairs")
