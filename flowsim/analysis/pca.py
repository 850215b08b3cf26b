"""PCA of learned features (Caron et al. 2023, appendix M, after Yang & Hu 2021).

The features of a point are the network's node outputs c_j σ(w_j·x/√d) (m numbers); the
scatter shows the points' first two principal-component scores, coloured by class, at
initialisation and after training. NTK scaling leaves the features quasi-random; the
asymmetric scalings separate the classes.
"""

from __future__ import annotations

import numpy as np


def pca_scores(F, components: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Scores (N, components) of the centred rows of F and their explained-variance ratios."""
    F = np.asarray(F, dtype=np.float64)
    Fc = F - F.mean(axis=0)
    U, s, _ = np.linalg.svd(Fc, full_matrices=False)
    var = s**2
    total = var.sum()
    k = min(components, len(s))
    scores = U[:, :k] * s[:k]
    # fix the sign so that each component's largest-magnitude score is positive
    signs = np.sign(scores[np.argmax(np.abs(scores), axis=0), np.arange(k)])
    signs[signs == 0] = 1.0
    ratio = var[:k] / total if total > 0 else np.zeros(k)
    return scores * signs, ratio


def class_separation(scores, labels) -> float:
    """Between-class over total variance of the scores (0 = no separation, 1 = perfect)."""
    scores = np.asarray(scores, float)
    labels = np.asarray(labels)
    mu = scores.mean(axis=0)
    total = np.sum((scores - mu) ** 2)
    between = sum(np.sum(labels == c) * np.sum((scores[labels == c].mean(axis=0) - mu) ** 2)
                  for c in np.unique(labels))
    return float(between / total) if total > 0 else 0.0
