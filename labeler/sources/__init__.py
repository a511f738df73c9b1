"""Live traffic: sync from trace stores and the OTLP receiver, each writing through ingest/."""
