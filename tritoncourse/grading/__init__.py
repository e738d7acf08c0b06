"""Grading: kernels taken from the notebook as source, tests run in fresh processes, nbgrader glue."""
