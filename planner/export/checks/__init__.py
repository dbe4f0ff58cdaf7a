"""Checks of exports by the real frameworks (see planner.export.check)."""
