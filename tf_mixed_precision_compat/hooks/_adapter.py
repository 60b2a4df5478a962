"""`KerasTarget`: what `install()` needs of each Keras target.

Only `install()` asks these adapters; which Keras is active, and which
objects are Keras ones, is `keras_target`'s (docs/architecture.md).
"""

import abc
import importlib
import types
from typing import Any, Callable

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat import keras_target

# `install()`'s `replace(original, replacement)`: puts `replacement` wherever
# this target's Keras holds `original` publicly, through the journal.
ReplaceFunction = Callable[[Any, Any], None]


class KerasTarget(abc.ABC):
  """How `install()` hooks one Keras target (`name`: `keras_target.KERAS3`
  or `keras_target.TF_KERAS`), behind one set of methods."""

  name: str

  @property
  def package(self) -> str:
    """The top-level Keras package (`"keras"`, `"tf_keras"`)."""
    return keras_target.package_name(self.name)

  def keras_root(self) -> types.ModuleType:
    """The module `tf.keras` resolves to on this target (imported)."""
    return importlib.import_module(_private_api.tf_keras_root_name(self.name))

  @abc.abstractmethod
  def symbol_for(self, spec: Any) -> Any:
    """What `install()` grafts at endpoint `spec` (an `EndpointSpec`)."""

  @abc.abstractmethod
  def install(self, journal: Any, replace: ReplaceFunction) -> None:
    """Applies this target's hooks through `install()`'s journal."""

  def guard_checkpoint_read(self, read: Callable[..., Any]
                           ) -> Callable[..., Any]:
    """`read` (`Checkpoint.read` or v1 `restore`), or a wrapper of it."""
    return read
