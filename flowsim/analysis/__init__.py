"""Analyses of archived runs (pruning, transfer, PCA, flow-vs-GD comparison)."""
