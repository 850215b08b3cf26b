"""Model kinds: `MODELS` maps a scenario's `model.kind` to the builder that turns a run
config and its data into a `Network`: the network (an `AbstractNet`), its initial weights
and the init record the archive keeps. `flowsim.run.build.build_run` assembles the run's
`Problem` from it.

The kinds, what validation knows of them and where each builder lies are declared once, in
`flowsim.kinds.MODELS` (its `builder`: "module:function"); this package's index of the
builders' modules is that registry, and `MODELS` is read from it. Beside them:

- `module.py`: `ModuleNet`, any Equinox model run as a network (the NTG by autodiff): the
  `mlp` and `python` kinds' networks, and a user's model given to `flowsim.simulate`;
- `foreign.py`: a Flax NNX module, a Flax Linen module with its variables, or an
  `(apply_fn, params)` pair given to `flowsim.simulate`, as the parameter pytree and pure
  apply `ModuleNet` runs (Flax imported only then);
- `shallow.py`: `ShallowNet`, the one-hidden-layer network of the `shallow` and `embedded`
  kinds, and `init_shallow`;
- `quadratic.py`, no kind: linear models under quadratic losses whose flows are known in
  closed form, for the tests and benchmarks of the stiff flow methods.

What every builder takes and returns (`Model`, `Network`, `Built`, `BuildError`) is `base.py`'s.
"""

from .. import plugins
from ..kinds import MODELS as KINDS
from .base import BuildError as BuildError
from .base import Built as Built
from .base import Model as Model
from .base import Network as Network
from .module import ModuleNet as ModuleNet
from .shallow import ShallowNet as ShallowNet
from .shallow import init_shallow as init_shallow


MODELS: dict[str, Model] = {name: Model(name, plugins.load(kind.builder)) for name, kind in KINDS.items() if kind.builder}
