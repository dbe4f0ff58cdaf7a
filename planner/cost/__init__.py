"""The cost model: one module per term, each returning seconds or bytes with its sources.

All terms are vectorised over a table of candidate layouts (numpy arrays, one row per layout) so that the
search can evaluate whole slices of the space at once; `planner.cost.evaluate` assembles them.
"""
