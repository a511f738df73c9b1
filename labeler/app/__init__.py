"""The Streamlit app: ``streamlit_app.py`` declares the pages; ``state`` owns the session."""
