"""The run path: a typed run config built into a `Problem`, stepped by an integrator over its
checkpoints, observed, and written to the archive.

    build.py         config -> Network (by model kind, `flowsim.models`) -> Problem
    integrators.py   a typed solver preset -> its integrator and its checkpoint grid
    batch.py         seeds stacked and the compiled vmapped kernels (init, advance, observe)
    state_arrays.py  a member's solver state to named arrays and back (checkpoint, resume)
    devices.py       where a batch's arrays live (one device, several, several processes)
    resources.py     the memory/disk estimate, checked before anything is built
    driver.py        the one loop over checkpoints; analyses plug in as hooks
    progress.py      what a long run shows while it works
    advice.py        what a flow's statistics say about the preset that should integrate it
    provenance.py    versions, commit, platform, device: what an archive records to trace it
    precision.py     float64 on for a run (not at `import flowsim`)
    session.py       scenario -> runs -> driver -> archive: what `flowsim run` does
    analyze.py       `flowsim analyze`: an archive's networks rebuilt and analysed again

Nothing is imported here: each module is imported by its own name. The two ways into this
path are `flowsim.run.session` (a scenario) and `flowsim.simulation` (a user's model).
"""
