"""Exact layout search: enumerate the space as tables, bound, evaluate vectorised, prove the optimum."""
