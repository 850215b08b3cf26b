"""Datasets as plain numpy float64 arrays: the papers' synthetic generators and file loaders.

`make_dataset(data, seed)` turns the typed `[data]` table of a scenario (`flowsim.config.Data`)
into a `Dataset`.
Every kind returns `y` as a 2-D array: one column for regression, one-hot columns for
classification. The arrays are numpy's: the draws do not depend on JAX or on the device.

Synthetic kinds (all draws from `np.random.default_rng(seed)`, training set first, then the
test set from the same distribution):

- `sphere-sine`       Caron et al. §6.1 / §8.1.1
- `single-relu`       Caron et al. §8.1.2 (journal version)
- `random-labels`     Chen, Vanden-Eijnden & Bruna, experiment 1
- `xor-noise`         Chen et al., experiment 3
- `quadratic-teacher` Chen et al., experiment 2

File kinds: `uci` (the shipped regression CSVs), `digits` (shipped UCI optdigits), `csv` (a
user CSV with a header row), `npz` (a user archive of arrays). `load_idx` reads the IDX
binary format of MNIST.

Images at the papers' scale, preprocessed as Cohen et al. (2021): `mnist` (the shipped
5 000-image MNIST subset), `cifar` (a user's CIFAR-10 subset as an .npz) and
`synthetic-images` (random CIFAR-shaped images labelled by a random tanh teacher).

The kinds live by family: `synthetic.py`, `tables.py` (uci, csv, npz), `digits.py` (digits
and IDX), `images.py` (mnist, cifar, synthetic-images); `base.py` holds `Dataset` and
`DataError`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..config.data_tables import Data
from .base import Dataset as Dataset
from .base import DataError as DataError
from .base import one_hot as one_hot
from .digits import DIGITS_CLASSES as DIGITS_CLASSES
from .digits import DIGITS_FILES as DIGITS_FILES
from .digits import DIGITS_MAX_PIXEL as DIGITS_MAX_PIXEL
from .digits import _digits
from .digits import load_idx as load_idx
from .images import MNIST_FILE as MNIST_FILE
from .images import _cifar, _mnist, _synthetic_images
from .images import cohen_preprocess as cohen_preprocess
from .images import load_mnist_5k as load_mnist_5k
from .synthetic import _quadratic_teacher, _random_labels, _single_relu, _sphere_sine, _xor_noise
from .synthetic import quadratic_features as quadratic_features
from .synthetic import sphere as sphere
from .synthetic import sphere_sine_target as sphere_sine_target
from .tables import DATA_DIR as DATA_DIR
from .tables import UCI_TARGETS as UCI_TARGETS
from .tables import _csv, _npz, _uci
from .tables import read_csv as read_csv


def make_dataset(data: Data, seed: int) -> Dataset:
    """The dataset described by a typed `[data]` table; `seed` seeds the data RNG."""
    return _MAKERS[data.kind](data, np.random.default_rng(seed))


_MAKERS: dict[str, Callable[[Data, np.random.Generator], Dataset]] = {
    "sphere-sine": _sphere_sine,
    "single-relu": _single_relu,
    "random-labels": _random_labels,
    "xor-noise": _xor_noise,
    "quadratic-teacher": _quadratic_teacher,
    "uci": _uci,
    "digits": _digits,
    "csv": _csv,
    "npz": _npz,
    "mnist": _mnist,
    "cifar": _cifar,
    "synthetic-images": _synthetic_images,
}
