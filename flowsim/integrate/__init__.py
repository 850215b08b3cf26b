"""Integrators: how the weights move (exact flow, its modified flow, discrete descent).

    base.py        AbstractIntegrator: init, advance, time, and what the driver records
    solver.py      AbstractFlowSolver: what the flow engine asks of a flow method (step
                   limit, rejection, dense read, error order, cost, certificate), declared once
    flow.py        the flow engine: FlowIntegrator steps any AbstractFlowSolver segment by
                   segment, resumable bit for bit; imports no method (each method's module
                   imports it and holds its factory)
    stiffness.py   Hairer's h·ρ of an explicit Runge–Kutta step: whether it was held by stability
    runge_kutta.py RungeKutta: Diffrax's Runge–Kutta methods as flow methods, and their factory
    tsit5.py       Tsit5: Diffrax's Tsit5 with its stage sums fused (tsit5's, and auto's in its Tsit5 steps)
    filippov/      FilippovIntegrator: the exact flow of a shallow ReLU net through its kinks
                   (modes.py the mode algebra, events.py the events, integrator.py the stepping)
    rock4.py       ROCK4: the stabilised explicit Runge–Kutta method for stiff flows (rock4.json
                   its coefficient tables; AbstractStabilised, the machinery it shares with rkc2)
    rkc2.py        RKC2: the second-order Runge–Kutta–Chebyshev method (Sommeijer–Shampine–Verwer)
    auto.py        Auto: Tsit5 while accuracy holds the step, ROCK4 while stability does (the default)
    central_field.py  the central flow of GD at step η (Cohen et al. 2025): its field and solver
    central_rmsprop.py  RMSProp's preconditioner in that field: RMSProp's central flow in (w, ν)
    sdcp.py        the small semidefinite complementarity problem the central flow solves
    central_flow.py   CentralIntegrator: the flow engine stepping the central field
    descent.py     AbstractDiscrete: the chunked step loop every discrete leg shares;
                   DescentIntegrator: GD, momentum, SGD
    optimizers.py  OptaxIntegrator: RMSProp, Adam and any optax transformation, full batch, t = kη
    adaptive_flows.py  the stable flows of RMSProp and Adam in (w, ν[, m]), stepped by the engine
    reference_pair.py  ReferencePair: a flow beside a tighter reference (its error certificate)

Nothing is imported here. The methods and kinds are declared in `flowsim.kinds.solvers`
(no JAX); the integrators' factories take the records of the settings groups their method
reads: `flowsim.run.integrators` fills them from a solver preset.
"""
