"""What a network is, and the maths of its loss: the pieces every model kind is made of.

    activations.py  ACTIVATIONS: σ by name (the names are declared in `flowsim.kinds`)
    losses.py       LOSSES: the training losses by name (declared in `flowsim.kinds`)
    net.py          AbstractNet: what a network offers (call, ntg, weights, weight_change, ...)
    problem.py      Problem = data + network + loss: loss, grad, velocity, ntg
    ntg.py          the generic NTG by autodiff (Θ̂ = J Jᵀ)
    scaling.py      node scalings λ_j of Caron et al. and the other parameterisations
    theory.py       theory numbers to overlay on simulations (κ_n, Chen et al.'s bounds)

Nothing is imported here: each module is imported by its own name.
"""
