"""Helpers shared by the whole test suite (importable as ``support``: tests/ is on sys.path)."""
