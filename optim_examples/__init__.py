"""Runnable optimizer showcases: ``python -m optim_examples`` runs them all,
``python -m optim_examples.<name>`` one of them."""
