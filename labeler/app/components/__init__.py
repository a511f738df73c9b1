"""Custom Streamlit components of the app (st.components.v2, inline HTML/JS/CSS, no build step)."""
