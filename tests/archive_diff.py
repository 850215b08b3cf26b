"""Every difference between two archives' datasets and attributes, apart from what differs
from one run to the next by nature: `flowsim diff` (flowsim/archive/diff.py), for the tests.

    python tests/archive_diff.py BEFORE.h5 AFTER.h5     # = flowsim diff BEFORE.h5 AFTER.h5

Used to hold a refactoring of the archive's code to "the archive is byte-identical": write
an archive before and after (`flowsim run quickstart -o X.h5 -q`) and compare."""

import sys

from flowsim.archive.diff import differences as _differences


def differences(before, after) -> list[str]:
    """What differs between the archives `before` and `after`, one line each."""
    return [str(d) for d in _differences(before, after)]


if __name__ == "__main__":
    from flowsim.cli import main

    sys.exit(main(["diff", *sys.argv[1:]]))
