"""Which Keras `tf.keras` is, and which objects are Keras ones.

The leaf every layer asks (docs/architecture.md): it imports nothing from
the rest of the package, and recognising an object never imports a Keras
package (an object of a package never imported cannot be one of its).

Example:

>>> active() in (KERAS3, TF_KERAS)
True
"""

import importlib
import sys
import types
from typing import Any, Optional

import tensorflow as tf

__all__ = ["KERAS3", "TF_KERAS", "TARGETS", "active", "global_policies",
           "import_package", "is_layer", "is_optimizer", "loaded_package",
           "loss_scale_optimizer_classes", "package_name"]

KERAS3 = "keras3"
TF_KERAS = "tf_keras"
TARGETS = (KERAS3, TF_KERAS)

_PACKAGES = {KERAS3: "keras", TF_KERAS: "tf_keras"}
_ROOT = __name__.split(".")[0]
# The package's own Keras loss-scale optimizer classes, found only if their
# modules are loaded: refusing to wrap an instance of one needs no import.
_OWN_LOSS_SCALE_OPTIMIZERS = (
    ("optimizers.loss_scale_optimizer", "LossScaleOptimizer"),
    ("optimizers.experimental_loss_scale_optimizer", "LossScaleOptimizerV1"))


def active() -> str:
  """The target `tf.keras` resolves to now: `TF_KERAS` or `KERAS3`."""
  # Its module name may be `tensorflow.keras` (an import statement re-executed
  # Keras' API files under it); the package defining its `Model` tells.
  model = getattr(tf.keras, "Model", None)
  name = getattr(model, "__module__", None) or ""
  return TF_KERAS if name.split(".")[0] == "tf_keras" else KERAS3


def package_name(target: str) -> str:
  """The top-level package of `target`; ValueError for another target."""
  if target not in _PACKAGES:
    raise ValueError(
        f"target must be one of {sorted(_PACKAGES)}, got {target!r}.")
  return _PACKAGES[target]


def loaded_package(target: str) -> Optional[types.ModuleType]:
  """`target`'s Keras package if the process already imported it, else None."""
  return sys.modules.get(package_name(target))


def import_package(target: str) -> Optional[types.ModuleType]:
  """`target`'s Keras package, imported if installed, else None."""
  try:
    return importlib.import_module(package_name(target))
  except ImportError:
    return None


def _loaded() -> list[types.ModuleType]:
  return [module for module in map(loaded_package, TARGETS)
          if module is not None]


def is_optimizer(obj: Any) -> bool:
  """Whether `obj` is an optimizer of either Keras (either family)."""
  for module in _loaded():
    optimizers = getattr(module, "optimizers", None)
    for base in (getattr(optimizers, "Optimizer", None),
                 getattr(getattr(optimizers, "legacy", None), "Optimizer",
                         None)):
      if isinstance(base, type) and isinstance(obj, base):
        return True
  return False


def is_layer(obj: Any) -> bool:
  """Whether `obj` is a layer of either Keras."""
  for module in _loaded():
    base = getattr(getattr(module, "layers", None), "Layer", None)
    if isinstance(base, type) and isinstance(obj, base):
      return True
  return False


def global_policies() -> list[Any]:
  """The global dtype policy of each Keras loaded, Keras 3's first."""
  policies = []
  for target, module in ((t, loaded_package(t)) for t in TARGETS):
    try:
      if target == KERAS3:
        policies.append(module.config.dtype_policy())  # type: ignore[union-attr]
      else:
        policies.append(module.mixed_precision.global_policy())  # type: ignore[union-attr]
    except AttributeError:  # Not loaded, or a Keras without this accessor.
      continue
  return policies


def loss_scale_optimizer_classes() -> list[type]:
  """Loaded Keras loss-scale optimizer classes: the package's, then Keras'."""
  classes = [getattr(sys.modules.get(f"{_ROOT}.{module}"), attr, None)
             for module, attr in _OWN_LOSS_SCALE_OPTIMIZERS]
  classes += [getattr(getattr(module, "mixed_precision", None),
                      "LossScaleOptimizer", None) for module in _loaded()]
  return [cls for cls in classes if isinstance(cls, type)]
