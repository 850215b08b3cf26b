"""Images at the scale of the edge-of-stability papers, preprocessed as Cohen et al. (2021) do.

Cohen, Kaur, Li, Kolter & Talwalkar's `cifar.py` divides the pixels by 255, flattens each image,
then centres and standardises every pixel by its mean and (population) deviation over the
training images, and one-hot encodes the labels for their square loss ½Σ(f − y)²/n
(`loss.kind = "half-sse-mean"`). Every kind here does the same (`cohen_preprocess`); a pixel
constant over the training images (MNIST's corners) is centred and divided by 1.

- `mnist`             the shipped 5 000-image MNIST subset, 500 per digit (`data/mnist_5k.npz`,
                      built by `data/make_mnist_5k.py`; provenance, licence and checksums in
                      `data/README.md`)
- `cifar`             the user's own CIFAR-10 subset as an .npz (X, y, optionally X_test, y_test):
                      point `data.path` at it for Cohen et al.'s exact setting
- `synthetic-images`  random CIFAR-shaped images labelled by a random fc-tanh teacher, any size,
                      for benchmarks
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..config.data_tables import CifarData, MnistData, SyntheticImagesData
from ..config.rules import MNIST_IMAGES
from .base import DataError, Dataset, _count, _real, one_hot
from .tables import DATA_DIR, _load_npz

MNIST_FILE = "mnist_5k.npz"
MNIST_CLASSES = 10
MNIST_PIXELS = 784   # 28 × 28, row-major
MAX_PIXEL = 255.0


def _flat(A: np.ndarray) -> np.ndarray:
    """(n, ...) → (n, features) float64, C order (also for n = 0)."""
    return A.reshape(len(A), math.prod(A.shape[1:])).astype(np.float64)


def cohen_preprocess(X_train: np.ndarray, X_test: np.ndarray, standardize: bool = True,
                     stats_from: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict]:
    """Flatten each image, then centre and standardise every feature by the mean and population
    deviation of `stats_from` (default: `X_train`), as Cohen et al.'s `center` and
    `standardize`; a feature constant there is divided by 1. Without `standardize`, only
    flattened. Returns float64 arrays and the statistics (for the archive)."""
    X_train = _flat(X_train)
    X_test = _flat(X_test)
    if not standardize:
        return X_train, X_test, {}
    ref = X_train if stats_from is None else _flat(stats_from)
    mean = ref.mean(axis=0)
    std = ref.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    return (X_train - mean) / std, (X_test - mean) / std, {"X_mean": mean, "X_std": std}


# ------------------------------------------------------------------------------ mnist


def load_mnist_5k(path: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The shipped images as stored: X (5000, 784) uint8 pixels, y (5000,) uint8 digits."""
    path = DATA_DIR / MNIST_FILE if path is None else Path(path)
    arrays = _load_npz(path)
    X, y = arrays.get("X"), arrays.get("y")
    if X is None or y is None or X.shape != (MNIST_IMAGES, MNIST_PIXELS) or y.shape != (MNIST_IMAGES,):
        raise DataError(f"{path}: expected X ({MNIST_IMAGES}, {MNIST_PIXELS}) and y ({MNIST_IMAGES},); the file "
                        f"holds {({k: v.shape for k, v in arrays.items()})} (rebuild it: data/make_mnist_5k.py)")
    return X, y


def _balanced(rng: np.random.Generator, labels: np.ndarray) -> np.ndarray:
    """A permutation of the rows in which every prefix is as balanced over the classes as it can
    be: the rows are shuffled, then ordered by their rank within their class (ties by class)."""
    order = rng.permutation(len(labels))
    shuffled = labels[order]
    rank = np.empty(len(labels), np.int64)
    for c in np.unique(shuffled):
        where = np.flatnonzero(shuffled == c)
        rank[where] = np.arange(len(where))
    return order[np.lexsort((shuffled, rank))]


def _mnist(data: MnistData, rng: np.random.Generator) -> Dataset:
    """The shipped 5 000-image MNIST subset (500 images of each digit).

    All of them, in the file's order, when `n` is absent and `n_test` is 0. Otherwise the images
    are shuffled with the data seed and ordered so that every prefix is balanced over the digits;
    the first n are the training set and the next n_test the test set (n = 1 000 gives exactly
    100 per digit). Preprocessed as Cohen et al. (`cohen_preprocess`), the statistics from the
    training images; y is one-hot.
    """
    X, y = load_mnist_5k()
    n = MNIST_IMAGES if data.n is None else _count(data.n, "n", 1)
    n_test = _count(data.n_test, "n_test")
    if n + n_test > MNIST_IMAGES:
        raise DataError(f"[data] n = {n}, n_test = {n_test}: together more than the {MNIST_IMAGES} shipped "
                        f"images; allowed: n + n_test <= {MNIST_IMAGES}")
    order = np.arange(MNIST_IMAGES) if n == MNIST_IMAGES else _balanced(rng, y)
    train, test = order[:n], order[n : n + n_test]
    X_train, X_test, stats = cohen_preprocess(X[train] / MAX_PIXEL, X[test] / MAX_PIXEL, data.standardize)
    return Dataset(X_train, one_hot(y[train].astype(np.int64), MNIST_CLASSES), X_test,
                   one_hot(y[test].astype(np.int64), MNIST_CLASSES), MNIST_CLASSES, stats)


# ------------------------------------------------------------------------------ cifar


def _labels(path: Path, key: str, y: np.ndarray, rows: int, classes: int) -> np.ndarray:
    if y.shape != (rows,):
        raise DataError(f"{path}: {key} has shape {y.shape}; expected ({rows},), one integer label per image")
    if len(y) and (not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= classes):
        raise DataError(f"{path}: {key} must hold integer labels in [0, {classes}) (data.classes = {classes}); "
                        f"it holds {y.dtype} values in [{y.min()}, {y.max()}]")
    return y.astype(np.int64)


def _first(path: Path, key: str, A: np.ndarray, count: int | None, count_key: str) -> np.ndarray:
    if count is None:
        return A
    if count > len(A):
        raise DataError(f"[data] {count_key} = {count}: {path} holds {len(A)} images in {key}; allowed: an integer "
                        f"in [{int(count_key == 'n')}, {len(A)}], or none for all")
    return A[:count]


def _pixels(A: np.ndarray) -> np.ndarray:
    """uint8 images as Cohen et al. read them (/ 255); other numbers as they are."""
    return A / MAX_PIXEL if A.dtype == np.uint8 else A.astype(np.float64)


def _cifar(data: CifarData, rng: np.random.Generator) -> Dataset:
    """The user's CIFAR-10 subset: an .npz holding X (n images of any shape, e.g. (n, 32, 32, 3)
    as torchvision's `CIFAR10.data`, or (n, 3072)) and y (n integer labels), optionally X_test
    and y_test. uint8 pixels are divided by 255.

    Cohen et al.'s setting: the whole CIFAR-10 training set in X, `n = 5000`: the statistics come
    from every image of X (theirs come from all 50 000), then the first n are kept (their
    `take_first`). The run seed is not used: the file fixes the data.
    """
    path = Path(data.path)
    arrays = _load_npz(path)
    missing = [key for key in ("X", "y") if key not in arrays]
    if missing or ("X_test" in arrays) != ("y_test" in arrays):
        missing += [key for key in ("X_test", "y_test") if key not in arrays and
                    {"X_test", "y_test"} & arrays.keys()]
        raise DataError(f"{path}: missing {', '.join(missing)}; the file holds {sorted(arrays)} (expected X and y, "
                        "and X_test with y_test or neither)")
    X, y = arrays["X"], arrays["y"]
    if X.ndim < 2 or len(X) < 2:
        raise DataError(f"{path}: X has shape {X.shape}; expected at least 2 images, each an array (n, ...)")
    X_test = arrays.get("X_test", np.empty((0, *X.shape[1:]), X.dtype))
    if X_test.shape[1:] != X.shape[1:]:
        raise DataError(f"{path}: X_test has images of shape {X_test.shape[1:]}, X of {X.shape[1:]}")
    classes = _count(data.classes, "classes", 2)
    y = _labels(path, "y", y, len(X), classes)
    y_test = _labels(path, "y_test", arrays.get("y_test", np.empty(0, np.int64)), len(X_test), classes)
    for key, A in (("X", X), ("X_test", X_test)):
        if not (np.issubdtype(A.dtype, np.number) and not np.issubdtype(A.dtype, np.complexfloating)):
            raise DataError(f"{path}: {key} holds {A.dtype} values; expected pixels as numbers (uint8 or float)")
        if not np.isfinite(A).all():
            raise DataError(f"{path}: {key} holds NaN or infinite values")
    pixels = _pixels(X)
    X_train, y_train = _first(path, "X", pixels, data.n, "n"), _first(path, "y", y, data.n, "n")
    if len(X_train) < 2:
        raise DataError(f"[data] n = {data.n}: need at least 2 training images")
    X_test, y_test = _first(path, "X_test", _pixels(X_test), data.n_test, "n_test"), \
        _first(path, "y_test", y_test, data.n_test, "n_test")
    X_train, X_test, stats = cohen_preprocess(X_train, X_test, data.standardize, stats_from=pixels)
    return Dataset(X_train, one_hot(y_train, classes), X_test, one_hot(y_test, classes), classes, stats)


# ------------------------------------------------------------------------------ synthetic images


def gaussian_blur(fields: np.ndarray, sigma: float) -> np.ndarray:
    """Blur the last two axes of `fields` by a Gaussian of `sigma` pixels that wraps round (a
    circular convolution with the normalised kernel exp(−r²/2σ²), r the wrapped distance)."""
    if sigma == 0:
        return fields
    h, w = fields.shape[-2:]
    dy = np.minimum(np.arange(h), h - np.arange(h))
    dx = np.minimum(np.arange(w), w - np.arange(w))
    kernel = np.exp(-(dy[:, None] ** 2 + dx[None, :] ** 2) / (2 * sigma**2))
    kernel /= kernel.sum()
    return np.fft.irfft2(np.fft.rfft2(fields) * np.fft.rfft2(kernel), s=(h, w))


def tanh_teacher(rng: np.random.Generator, sizes: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """A random fc-tanh network of layer sizes `sizes`, PyTorch's (and `eqx.nn.MLP`'s) default
    initialisation: weights and biases uniform on ±1/√fan_in."""
    layers = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        bound = 1.0 / math.sqrt(fan_in)
        layers.append((rng.uniform(-bound, bound, (fan_out, fan_in)), rng.uniform(-bound, bound, fan_out)))
    return layers


def teacher_labels(layers: list[tuple[np.ndarray, np.ndarray]], X: np.ndarray) -> np.ndarray:
    """argmax of the fc-tanh network `layers` on each row of X."""
    h = X
    for i, (W, b) in enumerate(layers):
        h = h @ W.T + b
        if i < len(layers) - 1:
            h = np.tanh(h)
    return np.argmax(h, axis=1)


def synthetic_images(rng: np.random.Generator, count: int, channels: int, size: int, blur: float,
                     shared: float) -> np.ndarray:
    """`count` images (count, channels, size, size): per channel a blurred Gaussian field, plus
    `shared` times a blurred field common to the channels, plus a brightness N(0, 1) per image."""
    own = gaussian_blur(rng.standard_normal((count, channels, size, size)), blur)
    common = gaussian_blur(rng.standard_normal((count, 1, size, size)), blur)
    brightness = rng.standard_normal((count, 1, 1, 1))
    return own + shared * common + brightness


def _synthetic_images(data: SyntheticImagesData, rng: np.random.Generator) -> Dataset:
    """CIFAR-shaped synthetic images for benchmarks at the papers' scale (the shrunk Cohen et al.
    problem of `cohen-scale-quick`: 500 images 3×8×8).

    Draws, in this order from the data seed: the teacher (fc-tanh d-widths-classes, uniform
    ±1/√fan_in), the n training images, the n_test test images (`synthetic_images`). Each image
    is flattened channel-first (d = channels·size²) and standardised per feature with the
    training statistics (`cohen_preprocess`). Its label is the teacher's argmax on the
    standardised image, one-hot; the classes come out skewed, some possibly empty. The teacher's
    layers are kept in `extra` (teacher_W0, teacher_b0, ...).
    """
    n, n_test = _count(data.n, "n", 1), _count(data.n_test, "n_test")
    channels, size = _count(data.channels, "channels", 1), _count(data.size, "size", 1)
    classes = _count(data.classes, "classes", 2)
    blur, shared = _real(data.blur, "blur", 0.0), _real(data.shared, "shared", 0.0)
    widths = [_count(w, "teacher_widths", 1) for w in data.teacher_widths]
    d = channels * size * size
    teacher = tanh_teacher(rng, [d, *widths, classes])
    X_train = synthetic_images(rng, n, channels, size, blur, shared)
    X_test = synthetic_images(rng, n_test, channels, size, blur, shared)
    X_train, X_test, stats = cohen_preprocess(X_train, X_test)
    extra = stats | {f"teacher_{name}{i}": A for i, layer in enumerate(teacher) for name, A in zip("Wb", layer)}
    return Dataset(X_train, one_hot(teacher_labels(teacher, X_train), classes), X_test,
                   one_hot(teacher_labels(teacher, X_test), classes), classes, extra)
