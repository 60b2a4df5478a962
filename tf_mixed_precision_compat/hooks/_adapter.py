"""`KerasTarget`: what `install()` needs of each Keras target.

Only `install()` asks these adapters (`hooks.current()`, `hooks.patched()`);
which Keras is active, and which objects are Keras ones, is
`keras_target`'s (docs/architecture.md).
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
  """How `install()` hooks one Keras target, behind one set of methods.

  Attributes:
    name: `keras_target.KERAS3` or `keras_target.TF_KERAS`.
  """

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


def is_keras_endpoint(spec: Any) -> bool:
  """Whether the endpoint `spec` has a path under `tf.keras`."""
  return any(path.startswith("keras.") for path in spec.v2 + spec.v1)
