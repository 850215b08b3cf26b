"""Analyses of archived runs (pruning, transfer, PCA, flow-vs-GD comparison).

    matching.py         rows of two solvers at the same time (compare's and the central flow's rule)
    compare.py          flow versus discrete trajectories at matched times: the numbers
    compare_central.py  GD beside its central flow: onset, noise floor, predicted loss
    compare_report.py   `flowsim compare`'s report table and CSV
    caron.py            Caron et al.'s analyses on trained networks: prune, transfer, PCA
    prune.py            pruning curves
    transfer.py         transfer of learned features
    pca.py              PCA of learned features

Nothing is imported here: each module is imported by its own name.
"""
