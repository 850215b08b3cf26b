"""What is recorded at each checkpoint: pure functions from (problem, state) to named arrays.

    observables.py  OBSERVABLES: the registry (the names are declared in `flowsim.kinds`),
                    `observe`/`observe_carried` (what the Hessian observables carry from
                    row to row), the reference arrays and each series' axes
    stability.py    the sharpness of the training loss and its Gauss–Newton part
    eigen.py        the eigen-tracker (block LOBPCG with guards, warm-started, stopped at a
                    relative accuracy) and stochastic Lanczos quadrature

Nothing is imported here: each module is imported by its own name.
"""
