"""Entry point: the sign-in gate and the navigation, nothing else.

Pages live in views/, not pages/: a pages/ folder next to the entry point switches Streamlit
to its legacy multipage mode, whose sidebar lists the files instead of this navigation.
"""

import logging

import streamlit as st

import labeler.labels as labels
from labeler.app import auth, state, widgets
from labeler.errors import LabelerError

# uncaught errors show their type and a generic line in the browser; the traceback goes to the log
st.set_option("client.showErrorDetails", "type")
# an emoji favicon is drawn in the page (a data: URL); a :material/...: one is fetched from Google's font server
st.set_page_config(page_title="labeler", page_icon="🏷️", layout="wide")

annotator = auth.current_annotator(state.get_db())
if annotator is None:
    auth.flush_cookie()
    st.stop()
with st.sidebar:
    auth.flush_cookie()  # first, so the cookie reaches the browser even when the next click cuts this run short
state.warm_metrics()  # the Metrics page's numbers, computed in the background once per server
state.sync_in_background()  # the live sources that have an interval, synced when due

pages = [
    # the root URL only forwards to /label: a default page is served at "/" alone, and /label must work too
    st.Page("views/start.py", title="Label", url_path="start", default=True, visibility="hidden"),
    st.Page("views/label.py", title="Label", icon=":material/label:", url_path="label"),
    st.Page("views/data.py", title="Data", icon=":material/database:", url_path="data"),
    st.Page("views/metrics.py", title="Metrics", icon=":material/monitoring:", url_path="metrics"),
    st.Page("views/review.py", title="Review", icon=":material/fact_check:", url_path="review"),
    st.Page("views/synth.py", title="Synth", icon=":material/auto_awesome:", url_path="synth"),
    st.Page("views/judge.py", title="Judge", icon=":material/balance:", url_path="judge"),
]
lead = auth.is_lead()
if lead:
    pages += [
        st.Page("views/items.py", title="Items", icon=":material/table_rows:", url_path="items"),
        st.Page("views/adjudicate.py", title="Adjudication", icon=":material/gavel:", url_path="adjudication"),
        st.Page("views/annotators.py", title="Annotators", icon=":material/groups:", url_path="annotators"),
        st.Page("views/settings.py", title="Settings", icon=":material/settings:", url_path="settings"),
    ]
nav = st.navigation(pages)
if lead and (flags := labels.flag_count(state.get_db(), by=annotator)):
    with st.sidebar:
        st.page_link("views/items.py", label=f"{flags} flag(s) to resolve", icon=":material/flag:")
with st.sidebar:
    st.button("Sign out", on_click=auth.sign_out, key="sign_out")
try:
    nav.run()
except LabelerError as e:  # a user error that escaped a page: one line, no traceback
    logging.getLogger("labeler.app").warning("page %s: %s", nav.url_path, e)
    st.error(widgets.escape_markdown(str(e).partition("\n")[0]), icon=":material/error:")

