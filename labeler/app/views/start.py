"""The app's root URL: sends the browser on to the Label page at its own address, ``/label``, with
the query string kept (``?item=``), so that the Label page has one URL that works wherever it is
typed or shared and the sidebar marks it as the page shown."""

import streamlit as st

st.switch_page("views/label.py", query_params=st.query_params.to_dict())
