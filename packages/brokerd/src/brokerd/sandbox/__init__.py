"""Sandbox backends: each runs one authorized call in a fresh, disposable sandbox."""
