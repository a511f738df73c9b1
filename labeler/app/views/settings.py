"""Settings (lead): grade scale and threshold, overlap, queue order, the pool (depth, show sources),
guidelines, routing of live queries, accounts and roles.

Every write passes the signed-in account as ``by``: the library refuses it unless that account is
a lead, whoever reached this page."""

import streamlit as st

import labeler
import labeler.labels as labels
from labeler import accounts
from labeler.app import auth, state, widgets
from labeler.errors import LabelerError
from labeler.estimate import active as estimate
from labeler.labels import routing, routing_rules, strata

db = state.get_db()
me = auth.require_lead("Settings")
current = state.settings()

st.title("Settings")

with st.form("settings_form"):
    st.subheader("Grades")
    names, helps = [], []
    for g, (name, desc) in enumerate(zip(current["grade_names"], current["grade_help"], strict=False)):
        c1, c2 = st.columns([1, 3])
        names.append(c1.text_input(f"Grade {g} name", value=name, key=f"set_grade_name_{g}"))
        helps.append(c2.text_input(f"Grade {g} definition", value=desc, key=f"set_grade_help_{g}"))
    threshold = st.number_input("Relevance threshold: a chunk is relevant when its grade is at least",
                                min_value=1, max_value=len(names) - 1, value=int(current["threshold"]),
                                key="set_threshold")
    st.subheader("Queue")
    order = st.selectbox("Order", list(labels.ORDERS), index=list(labels.ORDERS).index(current["queue_order"]),
                         key="set_order", help="random is seeded; lowest_score puts the retriever's weakest first; "
                         "active draws the queries where the judge is least sure (needs a judge run over all "
                         "traffic), for the all-traffic numbers on the Metrics page; stratified fills the topics in "
                         "proportion to their traffic (needs topics)")
    targets_text = st.text_input(
        "Stratified order: target share per topic (TOPIC=SHARE, comma separated; empty = each topic's traffic share)",
        value=", ".join(f"{t}={v:g}" for t, v in (current.get("stratified_targets") or {}).items()),
        key="set_stratified_targets")
    budget = st.number_input("Label budget of the active order (expected labels per draw)", 1, 1_000_000,
                             int(current.get("label_budget") or 100), key="set_label_budget")
    c1, c2, c3 = st.columns(3)
    fraction = c1.number_input("Share of items labeled by several annotators", 0.0, 1.0,
                               float(current["overlap_fraction"]), step=0.05, key="set_overlap")
    overlap_n = c2.number_input("Annotators on those items", 2, 10, int(current["overlap_annotators"]),
                                key="set_overlap_n")
    lease = c3.number_input("Lease minutes (an idle item returns to the queue)", 1, 240,
                            int(current["lease_minutes"]), key="set_lease")
    st.subheader("Pool (several retrievers)")
    c1, c2 = st.columns(2)
    depth = c1.number_input("Pool depth: chunks per retriever on the Label page", 1, 1000,
                            int(current.get("pool_depth") or 10), key="set_pool_depth",
                            help="Each retriever's top chunks, merged: each chunk is shown and graded once")
    # a checkbox label stays on one line, cut at the column's edge: the explanation goes in the help
    show_sources = c2.checkbox("Show sources to annotators", value=bool(current.get("show_sources")),
                               key="set_show_sources",
                               help="Annotators see which retriever returned a chunk, its rank and score; "
                                    "off = blind labeling")
    st.subheader("Guidelines (markdown)")
    guidelines = st.text_area("Shown to annotators on the Label page", value=current["guidelines"], height=200,
                              key="set_guidelines")
    st.subheader("Personal data")
    redact_on = st.checkbox("Redact personal data and secrets before anything is stored: ingests, imports, what "
                            "annotators type, LLM calls (emails, phone, card and id numbers, "
                            "IBANs, IP addresses, API keys and tokens become placeholders such as [EMAIL_1])",
                            value=labeler.redaction_enabled(db), key="set_redact")
    redact_lines = st.text_area("Your own patterns, one TYPE=REGEX a line (e.g. CUSTOMER=CUST-\\d{6})",
                                value="\n".join(f"{k}={v}" for k, v in (current.get("redact_patterns") or {}).items()),
                                key="set_redact_patterns")
    st.subheader("Sign-in")
    oidc_create = st.checkbox("Identity provider (OIDC): an unknown email becomes a new annotator account "
                              "(otherwise it is refused)", value=bool(current.get("oidc_create_accounts")),
                              key="set_oidc_create")
    saved = st.form_submit_button("Save settings", type="primary")

if saved:
    try:
        redact_patterns = labeler.parse_redact_patterns(redact_lines.splitlines())  # before anything is saved
        values = {"grade_names": [n.strip() or f"grade {i}" for i, n in enumerate(names)],
                  "grade_help": [h.strip() for h in helps], "threshold": int(threshold), "queue_order": order,
                  "overlap_fraction": float(fraction), "overlap_annotators": int(overlap_n),
                  "lease_minutes": int(lease), "guidelines": guidelines, "oidc_create_accounts": bool(oidc_create),
                  "label_budget": int(budget)}
        targets = strata.parse_targets([t for t in targets_text.split(",") if t.strip()])
        if order == "stratified":
            strata.require_topics(db)  # before the order changes: it refuses without topics
        if targets != {int(t): v for t, v in (current.get("stratified_targets") or {}).items()}:
            strata.set_stratified_targets(db, targets, by=me)
        if order == "active" and (current["queue_order"] != "active" or int(budget) != current.get("label_budget")):
            estimate.draw_newest(db, budget=int(budget), by=me)  # before the order changes: it may refuse
        for key, value in values.items():
            if value != current.get(key):
                labeler.set_setting(db, key, value, by=me)
        labels.set_pool_settings(db, by=me,
                                 pool_depth=int(depth) if int(depth) != current.get("pool_depth") else None,
                                 show_sources=bool(show_sources) if bool(show_sources) != bool(current.get(
                                     "show_sources")) else None)
        labeler.set_redaction(db, enabled=bool(redact_on), patterns=redact_patterns, by=me)
        labels.sync_queue(db)
        st.success("Saved.")
    except LabelerError as e:
        widgets.show_error(e)

# --- routing: which live queries enter the queue -------------------------------------------------------

st.subheader("Routing of live queries")
st.caption("Which queries synced from live sources enter the queue (labeler route set). Each routed query "
           "records its inclusion probability, so all-traffic numbers stay unbiased.")
rules = routing_rules.get_rules(db)
shown = rules or routing_rules.Rules()


@auth.guarded
def save_routing() -> None:
    get = st.session_state.get
    try:
        if not get("route_on"):
            if routing_rules.get_rules(db) is not None:
                routing_rules.clear_rules(db, by=me)
            return
        cap = int(get("route_cap") or 0)
        after = float(get("route_after_cap") or 0)
        routing_rules.replace_rules(db, {
            "rate": float(get("route_rate")), "always_signals": bool(get("route_signals")),
            "daily_cap": cap or None, "rate_after_cap": after if cap and after > 0 else None,
            "quotas": routing_rules.parse_quotas([q for q in (get("route_quotas") or "").split(",") if q.strip()]),
            "new_topics": bool(get("route_new_topics")), "seed": int(get("route_seed") or 0)}, by=me)
    except LabelerError as e:
        st.session_state[state.LABEL_ERROR] = str(e)


with st.form("routing_form"):
    st.checkbox("Route live queries by these rules (off: every live query is queued)", value=rules is not None,
                key="route_on")
    c1, c2, c3, c4 = st.columns(4)
    c1.number_input("Rate for the rest", 0.0, 1.0, float(shown.rate), step=0.01, format="%.3f", key="route_rate")
    c2.number_input("Daily cap (0 = none)", 0, 10_000_000, int(shown.daily_cap or 0), key="route_cap")
    c3.number_input("Rate after the cap (0 = a tenth of the rate)", 0.0, 1.0, float(shown.rate_after_cap or 0.0),
                    step=0.001, format="%.4f", key="route_after_cap")
    c4.number_input("Seed", 0, 2**31 - 1, int(shown.seed), key="route_seed")
    c1, c2, c3 = st.columns([1, 1, 2])
    c1.checkbox("Always route negative signals", value=shown.always_signals, key="route_signals")
    c2.checkbox("Route every query of a new topic", value=shown.new_topics, key="route_new_topics")
    c3.text_input("Quotas per day (TOPIC=N, comma separated)",
                  value=", ".join(f"{t}={n}" for t, n in sorted(shown.quotas.items())), key="route_quotas")
    st.form_submit_button("Save routing", on_click=save_routing)
if error := st.session_state.pop(state.LABEL_ERROR, None):
    st.error(widgets.escape_markdown(error))
st.caption(widgets.escape_markdown(routing.routing_summary(db)["describe"]))

# --- accounts -------------------------------------------------------------------------------------

st.subheader("Accounts and roles")
st.caption("Once any account has a password or a sign-in link, everyone signs in with name and password. "
           "The same is possible from the command line: labeler users add / role / passwd / remove.")


def _act(fn, *args, **kwargs) -> None:
    try:
        fn(*args, **kwargs)
    except LabelerError as e:
        st.session_state[state.LABEL_ERROR] = str(e)


@auth.guarded
def set_role(name: str) -> None:
    _act(accounts.set_role, db, name, st.session_state[f"role_{name}"], by=me)


@auth.guarded
def set_llm(name: str) -> None:
    _act(accounts.grant_llm, db, name, bool(st.session_state[f"llm_{name}"]), by=me)


@auth.guarded
def remove(name: str) -> None:
    _act(accounts.remove_user, db, name, by=me)


@auth.guarded
def new_link(name: str) -> None:
    try:
        st.session_state[state.NEW_LINK] = (name, accounts.new_invite(db, name, by=me))
    except LabelerError as e:
        st.session_state[state.LABEL_ERROR] = str(e)


@auth.guarded
def add_account() -> None:
    name = " ".join(st.session_state.get("new_annotator", "").split())
    password = st.session_state.get("new_annotator_password") or None
    st.session_state["new_annotator_password"] = ""
    if not name:
        st.session_state[state.LABEL_ERROR] = "Type the new account's name."
        return
    try:
        made = accounts.add_user(db, name, st.session_state.get("new_annotator_role", "annotator"),
                                 password=password, email=st.session_state.get("new_annotator_email") or None, by=me)
    except LabelerError as e:
        st.session_state[state.LABEL_ERROR] = str(e)
        return
    st.session_state["new_annotator"] = ""
    st.session_state["new_annotator_email"] = ""
    if made.token:
        st.session_state[state.NEW_LINK] = (made.account.name, made.token)


if error := st.session_state.pop(state.LABEL_ERROR, None):
    st.error(widgets.escape_markdown(error))
if link := st.session_state.pop(state.NEW_LINK, None):
    st.success(f"One-time sign-in link for {widgets.escape_markdown(link[0])} (shown once; it sets their password):")
    st.code(f"?invite={link[1]}", language=None)
    st.caption("Append it to this app's address, e.g. http://HOST:PORT/?invite=...")

for a in accounts.list_accounts(db):
    c1, c2, c3, c4, c5 = st.columns([3, 2, 2, 2, 1], vertical_alignment="center")
    with c1:
        status = "password set" if a.has_password else "sign-in link pending" if a.invite_pending else \
            "email sign-in" if a.email else "no password"
        widgets.plain_block(f"{a.name}{' (you)' if a.name == me else ''} · {status}"
                            + (f" · {a.email}" if a.email else ""))
    c2.selectbox("Role", ["annotator", "lead"], index=["annotator", "lead"].index(a.role), key=f"role_{a.name}",
                 on_change=set_role, args=(a.name,), label_visibility="collapsed")
    c3.checkbox("May run LLM jobs", value=a.may_run_llm or a.role == "lead", key=f"llm_{a.name}",
                on_change=set_llm, args=(a.name,), disabled=a.role == "lead",
                help="Judge and synth runs cost money: leads always may; annotators when allowed here")
    c4.button("New sign-in link", key=f"link_{a.name}", on_click=new_link, args=(a.name,),
              help="A one-time link with which they set a new password")
    c5.button("Remove", key=f"remove_{a.name}", on_click=remove, args=(a.name,), disabled=a.name == me,
              help="They can no longer sign in; their labels stay, attributed to them")

with st.form("add_annotator"):
    c1, c2, c3, c4 = st.columns([2, 2, 1, 2])
    c1.text_input("New account", key="new_annotator")
    c2.text_input("Email for OIDC sign-in (optional)", key="new_annotator_email")
    c3.selectbox("Role", ["annotator", "lead"], key="new_annotator_role")
    c4.text_input("Password (optional: else a sign-in link)", type="password", key="new_annotator_password")
    st.form_submit_button("Add", on_click=add_account)
