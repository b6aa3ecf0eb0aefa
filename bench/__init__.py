"""Benchmarks of DESIGN.md §10 (run each script directly; see its docstring)."""
