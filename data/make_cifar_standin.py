"""Regenerate data/cifar_standin_features.npz: a synthetic stand-in for the 512-d ResNet-18
(ImageNet) features of CIFAR-10 used by Caron et al. §8.2.2 (see data/README.md).

10 classes, 32 non-negative features (a ReLU of Gaussian class clusters seen through a fixed
random linear map), 1500 training and 500 test points, classes balanced. The arrays are a
deterministic function of the seed; the .npz bytes also hold zip timestamps.
    python data/make_cifar_standin.py
"""

from pathlib import Path

import numpy as np

SEED, CLASSES, DIM, N_TRAIN, N_TEST = 20230201, 10, 32, 1500, 500


def make():
    rng = np.random.default_rng(SEED)
    means = rng.normal(size=(CLASSES, DIM)) * 0.9
    basis = rng.normal(size=(DIM, DIM)) / np.sqrt(DIM)

    def draw(n):
        y = np.arange(n) % CLASSES
        rng.shuffle(y)
        z = means[y] + rng.normal(size=(n, DIM))
        return np.maximum(z @ basis * 1.5, 0.0).astype(np.float32), y.astype(np.int64)

    X_train, y_train = draw(N_TRAIN)
    X_test, y_test = draw(N_TEST)
    return {"X_train": X_train, "y_train": y_train, "X_test": X_test, "y_test": y_test,
            "classes": np.int64(CLASSES)}


if __name__ == "__main__":
    np.savez_compressed(Path(__file__).with_name("cifar_standin_features.npz"), **make())
