"""Benchmarks of docs/architecture.md §10 (run each script directly; see its docstring)."""
