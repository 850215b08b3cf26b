"""Integrators: how the weights move (exact flow, its modified flow, discrete descent).

    registry.py    the solver kinds and flow methods, declared once, and t = kη (no JAX)
    base.py        AbstractIntegrator: init, advance, time, and what the driver records
    flow.py        FlowIntegrator: Diffrax, segment by segment, resumable bit for bit
    filippov/      FilippovIntegrator: the exact flow of a shallow ReLU net through its kinks
                   (modes.py the mode algebra, events.py the events, integrator.py the stepping)
    descent.py     DescentIntegrator: GD, momentum, SGD in compiled chunks
    reference.py   ReferencePair: a flow beside a tighter reference (its error certificate)

Nothing is imported here, so that reading the registry does not import JAX. The integrators
take plain fields: `flowsim.presets` builds them from a solver preset.
"""
