"""A fake Kubernetes API server, just enough for an upstream EPP (GAIE v1.5.0): see app.py."""
