"""What is recorded at each checkpoint: pure functions from (problem, state) to named arrays.

    observables.py  OBSERVABLES: the registry (the names are declared in `flowsim.kinds`),
                    `observe`, the reference arrays and each series' axes
    stability.py    the sharpness of the training loss and its Gauss–Newton part

Nothing is imported here: each module is imported by its own name.
"""
