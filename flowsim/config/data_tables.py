"""The scenario's [data] table, one class per `kind`: the declarations alone, as in
`flowsim.config.typed` (which joins them into the scenario's `Config`); the loaders that
read them are `flowsim.data`'s."""

from __future__ import annotations

from typing import ClassVar, Literal, Union

from .declare import alike, file_setting, fraction, setting, table, table_spec
from .rules import MNIST_IMAGES, SEED, SEED_MAX, low_below_high, mnist_fits, split_sums_to_one
from .spec import ABSENT, REQUIRED, Float, Int, ListOf, OneOf, Str

UCI_NAMES = ("concrete", "energy", "airfoil", "plant")


_n = alike(lambda default: Int(lo=1, default=default),
           "training points (digits: the first n of the shipped training file; absent = all)")
_d = alike(lambda default, lo=1: Int(lo=lo, default=default), "input dimension")
_n_test = alike(lambda default: Int(lo=0, default=default),
                "test points, drawn like the training points (digits: absent = all)")
_noise = alike(lambda default: Float(lo=0, default=default),
               "standard deviation of the Gaussian noise added to the targets")
_standardize = alike(lambda: True, "standardise X and y with the training set's mean and deviation (kept in the "
                     "archive's /data attributes)")


@table
class _DataBase:
    kind: str
    seed: int | Literal["run"] = setting(
        OneOf(options=(SEED, Str(choices=("run",))), default=0),
        "seed of the data's random draws and splits, shared by every run; \"run\": each run's own seed")


@table
class SphereSineData(_DataBase):
    kind: Literal["sphere-sine"] = "sphere-sine"
    n: int = _n(100)
    d: int = _d(50)
    noise: float = _noise(1.0)
    n_test: int = _n_test(100)


@table
class SingleReluData(_DataBase):
    kind: Literal["single-relu"] = "single-relu"
    n: int = _n(100)
    d: int = _d(50)
    noise: float = _noise(0.0)
    n_test: int = _n_test(1000)


@table
class RandomLabelsData(_DataBase):
    RULES: ClassVar = (low_below_high,)
    kind: Literal["random-labels"] = "random-labels"
    n: int = _n(20)
    d: int = _d(20)
    n_test: int = _n_test(0)
    low: float = setting(-0.5, "lower end of the uniform random labels")
    high: float = setting(0.5, "upper end of the uniform random labels")


@table
class XorNoiseData(_DataBase):
    kind: Literal["xor-noise"] = "xor-noise"
    n: int = _n(600)
    d: int = _d(50, lo=3)   # the XOR pattern in 2 coordinates plus at least one noise one
    n_test: int = _n_test(500)


@table
class QuadraticTeacherData(_DataBase):
    kind: Literal["quadratic-teacher"] = "quadratic-teacher"
    n: int = _n(100)
    d: int = _d(30)
    n_test: int = _n_test(500)
    teacher_width: int = setting(Int(lo=1, default=5), "hidden nodes of the quadratic teacher network")
    noise: float = _noise(0.0)


@table
class Split:
    RULES: ClassVar = (split_sums_to_one,)
    train: float = setting(fraction(0.4), "share of the rows in the training set")
    test: float = setting(fraction(0.2), "share of the rows in the test set")
    valid: float = setting(fraction(0.4), "share of the rows held out as validation (not used by the flow)")


@table
class UciData(_DataBase):
    kind: Literal["uci"] = "uci"
    name: Literal[UCI_NAMES] = setting(REQUIRED, "which shipped UCI regression dataset (data/<name>.csv)")
    split: Split = setting(table_spec(Split, what="a table {train, test, valid} of fractions summing to 1"))
    permute_seed: int = setting(Int(lo=0, hi=SEED_MAX, default=10),
                                "seed of the row permutation before the split (Caron et al. used 10)")
    standardize: bool = _standardize()


@table
class DigitsData(_DataBase):
    kind: Literal["digits"] = "digits"
    n: int | None = _n(ABSENT)   # None: every training point
    n_test: int | None = _n_test(ABSENT)   # None: every test point
    standardize: bool = _standardize()


@table
class CsvData(_DataBase):
    kind: Literal["csv"] = "csv"
    path: str = file_setting()
    target: str | tuple[str, ...] = setting(
        OneOf(options=(Str(nonempty=True), ListOf(item=Str(nonempty=True), nonempty=True, distinct=True))),
        "the column name(s) that form y; every other column is an input")
    test_fraction: float = setting(Float(lo=0.0, hi=1.0, hi_open=True, default=0.2),
                                   "share of the (permuted) rows held out as the test set; 0 = none")
    standardize: bool = _standardize()


@table
class NpzData(_DataBase):
    kind: Literal["npz"] = "npz"
    path: str = file_setting()


# Images preprocessed as Cohen et al. (2021) do in their cifar.py: pixels / 255, flattened, then
# centred and standardised per pixel; one-hot targets (flowsim/data/images.py).
_cohen_standardize = alike(lambda: True, "centre and standardise every pixel by its training mean and deviation, "
                           "as Cohen et al. do (a pixel constant over the training images is centred only); false: "
                           "pixels / 255")


@table
class MnistData(_DataBase):
    RULES: ClassVar = (mnist_fits,)
    kind: Literal["mnist"] = "mnist"
    n: int | None = setting(Int(lo=1, hi=MNIST_IMAGES, default=ABSENT),
                            f"training images of the shipped {MNIST_IMAGES}-image MNIST subset, n/10 of each digit "
                            "(rounded), drawn with `seed`; absent = all")
    n_test: int = setting(Int(lo=0, hi=MNIST_IMAGES, default=0),
                          "test images, drawn like the training ones from the images they leave")
    standardize: bool = _cohen_standardize()


@table
class CifarData(_DataBase):
    kind: Literal["cifar"] = "cifar"
    path: str = file_setting("your .npz: X (n images, any shape such as (n, 32, 32, 3) or (n, 3072); uint8 pixels are "
                      "divided by 255) and y (n integer labels in [0, classes)), optionally X_test and y_test")
    n: int | None = setting(Int(lo=1, default=ABSENT),
                            "the first n images of X (Cohen et al. take the first 5 000); absent = all")
    n_test: int | None = setting(Int(lo=0, default=ABSENT),
                                 "the first n_test images of X_test; absent = all (none without X_test)")
    classes: int = setting(Int(lo=2, default=10), "the number of classes (one-hot columns of y)")
    standardize: bool = _cohen_standardize()


@table
class SyntheticImagesData(_DataBase):
    kind: Literal["synthetic-images"] = "synthetic-images"
    n: int = _n(500)
    n_test: int = _n_test(0)
    channels: int = setting(Int(lo=1, default=3), "channels of each synthetic image")
    size: int = setting(Int(lo=1, default=8), "height and width of each synthetic image, in pixels")
    blur: float = setting(Float(lo=0.0, default=1.0),
                          "standard deviation, in pixels, of the Gaussian blur of each random field (wrapping round)")
    shared: float = setting(Float(lo=0.0, default=1.5), "weight of the blurred field shared by every channel")
    classes: int = setting(Int(lo=2, default=10), "outputs of the random teacher; the labels are its argmax")
    teacher_widths: tuple[int, ...] = setting(ListOf(item=Int(lo=1), nonempty=True, default=[200, 200]),
                                              "hidden widths of the random fc-tanh teacher that labels the images")


@table
class ArraysData(_DataBase):
    """Arrays passed to `flowsim.simulate` (no scenario file names this kind): their sizes and
    a digest, so that resuming with other arrays is refused."""

    IN_FILES: ClassVar = False
    kind: Literal["arrays"] = "arrays"
    n: int
    d: int
    n_test: int
    outputs: int
    digest: str


Data = Union[SphereSineData, SingleReluData, RandomLabelsData, XorNoiseData,
             QuadraticTeacherData, UciData, DigitsData, CsvData, NpzData, MnistData, CifarData,
             SyntheticImagesData, ArraysData]
