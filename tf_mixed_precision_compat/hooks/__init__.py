"""What `install()` applies to each Keras target, one adapter per target.

`current()` is the active target's `KerasTarget` (`_adapter`): Keras 3
(`keras3`) or tf_keras (`tf_keras/`, `TF_USE_LEGACY_KERAS=1`). Only
`install` (and `auto_tf_keras`, which picks tf_keras) imports this package;
the rest of the package asks `keras_target` (docs/architecture.md).

Example:

>>> current().name == keras_target.active()
True
"""

from tf_mixed_precision_compat import keras_target
from tf_mixed_precision_compat.hooks import _adapter
from tf_mixed_precision_compat.hooks import keras3 as _keras3
from tf_mixed_precision_compat.hooks.tf_keras import adapter as _tf_keras

__all__ = ["KerasTarget", "current", "get", "patched"]

KerasTarget = _adapter.KerasTarget

_ADAPTERS = {adapter.name: adapter
             for adapter in (_keras3.ADAPTER, _tf_keras.ADAPTER)}


def current() -> KerasTarget:
  """The active target's adapter (`keras_target.active()`)."""
  return _ADAPTERS[keras_target.active()]


def get(name: str) -> KerasTarget:
  """The adapter of target `name` (`KERAS3` or `TF_KERAS`, else a
  `ValueError`), active or not."""
  keras_target.package_name(name)  # Raises ValueError naming both.
  return _ADAPTERS[name]


def patched() -> list[KerasTarget]:
  """The adapters whose hooks `install()` applies, in order: Keras 3's
  always (`keras` stays importable), then the active target's if another."""
  return [_keras3.ADAPTER] + (
      [current()] if keras_target.active() != keras_target.KERAS3 else [])
