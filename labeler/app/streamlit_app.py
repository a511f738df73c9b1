"""Entry point: page config and navigation only.

Pages live in views/, not pages/: a pages/ folder next to the entry point switches Streamlit
to its legacy multipage mode, whose sidebar lists the files instead of our navigation.
"""

import streamlit as st

st.set_page_config(page_title="labeler", page_icon=":material/label:", layout="wide")

pages = [
    st.Page("views/data.py", title="Data", icon=":material/database:", url_path="data", default=True),
]
st.navigation(pages).run()
