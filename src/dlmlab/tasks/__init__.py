"""Tasks and datasets for the studies (synthetic and real)."""
