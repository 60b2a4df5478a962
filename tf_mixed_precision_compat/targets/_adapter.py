"""`KerasTarget`: the one interface each Keras target implements.

`install()` and the shared modules ask a target adapter (from
`targets.current()` / `targets.adapters()`) instead of naming a Keras
package; docs/architecture.md describes the two implementations.
"""

import abc
import importlib
import sys
import types
from typing import Any, Callable, Optional

from tf_mixed_precision_compat import _private_api

# `install()`'s `replace(original, replacement)`: puts `replacement` wherever
# this target's Keras holds `original` publicly, through the journal.
ReplaceFunction = Callable[[Any, Any], None]


class KerasTarget(abc.ABC):
  """What differs between Keras 3 and tf_keras, behind one set of methods.

  Recognition methods (`is_optimizer`, `is_layer`, `global_policy`,
  `loss_scale_optimizer_classes`) only look at a Keras package the process
  already imported: an object of a package never imported cannot be one of
  its, so asking never imports a Keras.

  Attributes:
    name: `targets.KERAS3` or `targets.TF_KERAS`.
    package: The top-level Keras package (`"keras"`, `"tf_keras"`).
  """

  name: str
  package: str

  def loaded_package(self) -> Optional[types.ModuleType]:
    """The Keras package if the process already imported it, else None."""
    return sys.modules.get(self.package)

  def import_package(self) -> Optional[types.ModuleType]:
    """The Keras package, imported if installed, else None."""
    try:
      return importlib.import_module(self.package)
    except ImportError:
      return None

  def keras_root(self) -> types.ModuleType:
    """The module `tf.keras` resolves to on this target (imported)."""
    return importlib.import_module(_private_api.tf_keras_root_name(self.name))

  @abc.abstractmethod
  def symbol_for(self, spec: Any) -> Any:
    """What `install()` grafts at the registered endpoint `spec`.

    Args:
      spec: An `endpoints.EndpointSpec`.

    Returns:
      This target's object for a Keras endpoint (a path under `keras.`),
      else `spec.symbol`.

    Raises:
      LookupError: A Keras endpoint this target has no object for.
    """

  @abc.abstractmethod
  def install(self, journal: Any, replace: ReplaceFunction) -> None:
    """Applies this target's own hooks through `install()`'s journal.

    Args:
      journal: `install()`'s journal (`set_attr`, `set_item`, `on_undo`).
      replace: Replaces a public function of this Keras (see
        `ReplaceFunction`).
    """

  def guard_checkpoint_read(self, read: Callable[..., Any]
                           ) -> Callable[..., Any]:
    """`tf.train.Checkpoint.read` (or v1 `restore`) as this target needs it.

    Args:
      read: The method `install()` is about to graft.

    Returns:
      `read`, or a wrapper of it.
    """
    return read

  @abc.abstractmethod
  def experimental_loss_scale_optimizer(self) -> type:
    """This target's TF 2.3 `LossScaleOptimizerV1` class (imported)."""

  def loss_scale_optimizer_classes(self) -> list[type]:
    """Loss-scale optimizer classes of this Keras (if loaded).

    The graph rewrite refuses to wrap an instance again.
    """
    module = self.loaded_package()
    cls = getattr(getattr(module, "mixed_precision", None),
                  "LossScaleOptimizer", None)
    return [cls] if isinstance(cls, type) else []

  def is_optimizer(self, obj: Any) -> bool:
    """Whether `obj` is an optimizer of this Keras (either family)."""
    optimizers = getattr(self.loaded_package(), "optimizers", None)
    bases = [getattr(optimizers, "Optimizer", None),
             getattr(getattr(optimizers, "legacy", None), "Optimizer", None)]
    return any(isinstance(base, type) and isinstance(obj, base)
               for base in bases)

  def is_layer(self, obj: Any) -> bool:
    """Whether `obj` is a layer of this Keras."""
    layers = getattr(self.loaded_package(), "layers", None)
    base = getattr(layers, "Layer", None)
    return isinstance(base, type) and isinstance(obj, base)

  @abc.abstractmethod
  def global_policy(self) -> Any:
    """This Keras's global dtype policy, or None if it has none loaded."""


def is_keras_endpoint(spec: Any) -> bool:
  """Whether the endpoint `spec` has a path under `tf.keras`."""
  return any(path.startswith("keras.") for path in spec.v2 + spec.v1)
