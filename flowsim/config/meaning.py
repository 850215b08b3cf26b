"""One line of meaning per scenario and solver-preset key, for the generated reference
(`flowsim.config.reference`). Keys are dotted as `--set` names them; solver-preset keys
carry the prefix `solver.`. A key the schema gains without a line here fails
`tests/test_reference.py`."""

MEANING = {
    # ---- top level
    "name": "the scenario's name: the archive defaults to runs/<name>.h5",
    "description": "one line shown by `flowsim list` and stored in the archive",
    "seeds": "the runs' seeds (initial weights; data too with `data.seed = \"run\"`); "
             "`{count = N, start = S}` is shorthand for S … S+N−1",
    "dtype": "floating-point precision of data, weights and solvers; float32 needs flow presets with "
             "rtol ≥ 1e-5, and not the filippov method (float64 only)",
    # ---- [data]
    "data.kind": "the dataset: a synthetic generator, a shipped dataset, or your own csv/npz file",
    "data.seed": "seed of the data's random draws and splits, shared by every run; \"run\": each run's "
                 "own seed",
    "data.n": "training points (digits: the first n of the shipped training file; absent = all)",
    "data.d": "input dimension",
    "data.noise": "standard deviation of the Gaussian noise added to the targets",
    "data.n_test": "test points, drawn like the training points (digits: absent = all)",
    "data.low": "lower end of the uniform random labels",
    "data.high": "upper end of the uniform random labels",
    "data.teacher_width": "hidden nodes of the quadratic teacher network",
    "data.name": "which shipped UCI regression dataset (data/<name>.csv)",
    "data.split.train": "share of the rows in the training set",
    "data.split.test": "share of the rows in the test set",
    "data.split.valid": "share of the rows held out as validation (not used by the flow)",
    "data.permute_seed": "seed of the row permutation before the split (Caron et al. used 10)",
    "data.standardize": "standardise X and y with the training set's mean and deviation (kept in the "
                        "archive's /data attributes)",
    "data.path": "the file (csv: one header row, numeric columns; npz: X_train, y_train, optional "
                 "X_test, y_test and an integer `classes`)",
    "data.target": "the column name(s) that form y; every other column is an input",
    "data.test_fraction": "share of the (permuted) rows held out as the test set; 0 = none",
    # ---- [model]
    "model.kind": "the network: one hidden layer (shallow), on fixed embeddings (embedded), a deep MLP, "
                  "or your own Equinox module (python)",
    "model.width": "hidden nodes m",
    "model.activation": "σ, by name or as a plug-in \"package.module:function\"",
    "model.init_std": "standard deviation of the Gaussian initial weights",
    "model.output": "output weights a_j: fixed ±1 drawn once, or trained with the hidden layer",
    "model.zeroed": "subtract a frozen copy of the initial network so that f = 0 at t = 0 (Caron "
                    "Assumption 7.7)",
    "model.init_path": "an .npz with W0 (m×d) and a (m) to start from instead of a random draw",
    "model.scaling.kind": "node scaling λ_j of Caron et al. (ntk: all equal; asymmetric: a Zipf "
                          "part; single, finite, custom; mean-field, standard: 1/m, 1)",
    "model.scaling.gamma": "share γ of the symmetric (NTK) part of the scaling",
    "model.scaling.alpha": "Zipf exponent α of the asymmetric part",
    "model.scaling.k": "the non-symmetric part is shared equally by the first k nodes",
    "model.scaling.path": "an .npy or .npz holding the m scalings λ_j",
    "model.embedding": "features φ(x) the hidden layer sees (Chen et al.): x itself, quadratic "
                       "monomials, or random features",
    "model.chen_scaling": "which column of Chen et al.'s Table 1 sets the output scale (theirs = "
                          "the paper's code)",
    "model.c_hat": "magnitude ĉ of the fixed output weights c_i = ±ĉ",
    "model.features": "number D of random features (random-features embedding only)",
    "model.widths": "hidden widths, input side first (the depth is their number)",
    "model.parameterisation": "how widths scale initial variances and the forward pass: standard, "
                              "ntk, mean-field or µP (Yang & Hu's abc form)",
    "model.bias": "whether each dense layer has a bias",
    "model.train": "\"all\", or the indices of the layers that train (0 = the input layer); the "
                   "others stay at their initial values",
    "model.factory": "\"package.module:function\" called as factory(key, d, k), returning an Equinox "
                     "module that maps one input (d,) to outputs (k,)",
    # ---- [loss]
    "loss.kind": "the training loss, by name or as a plug-in \"package.module:function\" "
                 "(pred, y) -> scalar",
    # ---- [run]
    "run.t_end": "the horizon in flow time; GD reaches it in t_end/η steps (a whole number for every "
                 "discrete solver)",
    "run.checkpoints": "when rows are recorded: {every = T}, {count = N, spacing} or {times = [...]} "
                       "(t = 0 is always row 0)",
    "run.checkpoints.every": "a row every T units of flow time",
    "run.checkpoints.count": "N rows after t = 0, up to t_end",
    "run.checkpoints.spacing": "linear, or log (from t_end/1000)",
    "run.checkpoints.times": "explicit increasing times in (0, t_end]",
    "run.solvers": "solver presets by name (files in solvers/) or inline tables; each runs every seed "
                   "of every sweep point",
    "run.observe": "the series recorded at every checkpoint (docs/scenarios.md lists the observables)",
    "run.ntg_points": "the NTG (and observables built on it) uses the first k training points",
    "run.stop_loss": "> 0: a flow stops (status `stopped`) once the loss falls to this value",
    # ---- [sweep]
    "sweep": "lists of values for dotted keys, combined as a product or zipped; each combination is a "
             "sweep point run for every seed",
    # ---- [analysis] (Caron et al.'s analyses of the trained networks)
    "analysis.solvers": "which solvers' final networks are analysed (empty = all)",
    "analysis.prune": "pruning curves: test loss after keeping the most important nodes",
    "analysis.prune.enabled": "run this analysis",
    "analysis.prune.points": "number of kept-node counts on the curve",
    "analysis.prune.importance": "node importance: weight = λ_j‖w_j‖² (the text), lambda = λ_j‖a_j‖² "
                                 "(their code)",
    "analysis.transfer": "transfer learning: a new network trained on the k most important nodes' "
                         "features",
    "analysis.transfer.enabled": "run this analysis",
    "analysis.transfer.k": "the feature counts k tried",
    "analysis.transfer.hidden": "hidden width of the network trained on the transferred features",
    "analysis.transfer.steps": "its GD steps",
    "analysis.transfer.learning_rate": "its GD step (the text's 1.0 diverges)",
    "analysis.transfer.importance": "how nodes are ranked (as in prune)",
    "analysis.transfer.standardize": "standardise the transferred features",
    "analysis.pca": "principal components of the node outputs on held-out points, before and after "
                    "training",
    "analysis.pca.enabled": "run this analysis",
    "analysis.pca.points": "held-out points used (at most this many)",
    # ---- [plot]
    "plot.figure": "the layout `flowsim plot` draws: the default panels, or a Chen et al. figure",
    # ---- solver presets
    "solver.kind": "flow (the exact gradient flow), modified-flow (the flow GD follows to second "
                   "order), central-flow (the path GD's time average follows at the edge of "
                   "stability), gd, momentum, sgd",
    "solver.name": "the preset's name in the archive (an inline table's own; a file's is its stem)",
    "solver.description": "one line shown by `flowsim list`",
    "solver.method": ("the Diffrax method (explicit Runge–Kutta, or kvaerno5: implicit, matrix-free), "
                      "rock4: stabilised explicit Runge–Kutta–Chebyshev for stiff flows (its cost grows "
                      "like √sharpness, an explicit method's like sharpness), or filippov: "
                      "event-driven through ReLU kinks"),
    "solver.rtol": "relative tolerance of the adaptive step control",
    "solver.atol": "absolute tolerance of the adaptive step control",
    "solver.dtmin": "smallest step allowed (0 = none)",
    "solver.dtmax": "largest step allowed (0 = none)",
    "solver.max_steps": "steps allowed over the whole run; reaching it ends the flow with status "
                        "`max_steps`",
    "solver.linear_rtol": "GMRES relative tolerance inside implicit stages",
    "solver.linear_atol": "GMRES absolute tolerance inside implicit stages",
    "solver.newton_rtol": "Newton relative tolerance of implicit stages",
    "solver.newton_atol": "Newton absolute tolerance of implicit stages",
    "solver.krylov_restart": "GMRES restart length",
    "solver.krylov_max_steps": "GMRES iterations per linear solve",
    "solver.pcoeff": "proportional coefficient of the PID step control (0 = integral control only)",
    "solver.icoeff": "integral coefficient of the PID step control",
    "solver.slots": "filippov: kink surfaces one node may slide on at once; a node that meets more "
                    "ends the run with status `failed` (a larger value goes on, at a cost growing as "
                    "slots² per node while more than 4 are in use; never more than min(n, d) are used)",
    "solver.rho_every": "rock4: accepted steps between estimates of the spectral radius ρ of the "
                        "flow's Jacobian (one power-iteration Hessian-vector product each; also "
                        "estimated again after a rejected step)",
    "solver.rho_safety": "rock4: the factor ρ's estimate is multiplied by (power iteration approaches ρ "
                         "from below, slowly where the top of the Hessian spectrum is clustered)",
    "solver.reference": "a tighter flow preset solved beside this one: the archive then holds this "
                        "flow's global-error estimate (`flow_error`)",
    "solver.learning_rate": "the step η (modified-flow: the GD step whose modified equation it solves; "
                            "central-flow: the GD step whose central flow it solves)",
    "solver.max_eigen": "central-flow: Hessian eigen-directions tracked (by warm-started LOBPCG), at most",
    "solver.track_threshold": "central-flow: a tracked direction whose ηλ/2 reaches this enters the "
                              "complementarity problem that holds it at 2/η (third derivatives are "
                              "computed for it); below, it is free",
    "solver.divergence_factor": "the run is `diverged` once the loss exceeds this × the initial loss",
    "solver.beta": "heavy-ball momentum coefficient",
    "solver.batch_size": "minibatch size (sampled with the run's seed)",
}
