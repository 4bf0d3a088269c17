"""Runnable optimizer showcases: ``python -m optim_examples`` runs the declarer-by-optimizer
matrix, ``python -m optim_examples NAME`` one example (``--help`` lists them)."""
