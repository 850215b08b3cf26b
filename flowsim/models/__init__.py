"""Model kinds, declared once: `MODELS` maps a scenario's `model.kind` to the builder that
turns a run config and its data into a `Network`: the network (an `AbstractNet`), its
initial weights and the init record the archive keeps. `flowsim.run.build.build_run`
assembles the run's `Problem` from it.

- ``shallow``: Caron et al.'s one-hidden-layer network with node scaling (`shallow.py`);
- ``embedded``: Chen, Vanden-Eijnden & Bruna's models, a shallow net on fixed embedded
  inputs φ(X) (`embedded.py`);
- ``mlp``: fully connected networks of any depth (`mlp.py`), run as Equinox modules
  through `ModuleNet` (`module.py`), like a user's model given to `flowsim.simulate`;
- ``python``: the user's own Equinox network, built by a factory named by import path
  (`flowsim.plugins`), also through `ModuleNet`.

`quadratic.py` is no kind: linear models under quadratic losses whose flows are known in
closed form, for the tests and benchmarks of the stiff flow methods.

What every builder takes and returns (`Model`, `Network`, `Built`, `BuildError`) is `base.py`'s;
the kinds' names and what validation knows of them are declared in `flowsim.kinds.MODELS`.
"""

from .base import BuildError as BuildError
from .base import Built as Built
from .base import Model as Model
from .base import Network as Network
from .embedded import build_embedded
from .mlp import build_mlp
from .module import ModuleNet as ModuleNet
from .module import build_python
from .shallow import ShallowNet as ShallowNet
from .shallow import build_shallow
from .shallow import init_shallow as init_shallow

MODELS: dict[str, Model] = {m.name: m for m in (
    Model("shallow", build_shallow),
    Model("embedded", build_embedded),
    Model("mlp", build_mlp),
    Model("python", build_python),
)}
