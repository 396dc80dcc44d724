"""Built-in example models (no download): tiny random-weight models for demos and tests."""
