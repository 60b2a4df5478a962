"""Which Keras `tf.keras` is, and its adapter: the one place that decides.

`current()` is the active target's `KerasTarget` (`_adapter`): Keras 3
(`keras3`) or tf_keras (`tf_keras/`, `TF_USE_LEGACY_KERAS=1`). Shared code
asks these adapters, never a Keras package by name (docs/architecture.md).

Example:

>>> current().name == active()
True
"""

from tf_mixed_precision_compat.targets import _adapter
from tf_mixed_precision_compat.targets import keras3 as _keras3
from tf_mixed_precision_compat.targets.tf_keras import adapter as _tf_keras

import tensorflow as tf

__all__ = ["KERAS3", "TF_KERAS", "KerasTarget", "active", "adapters",
           "current", "get", "patched", "select_tf_keras"]

KerasTarget = _adapter.KerasTarget

KERAS3 = _keras3.ADAPTER.name
TF_KERAS = _tf_keras.ADAPTER.name

_ADAPTERS = {KERAS3: _keras3.ADAPTER, TF_KERAS: _tf_keras.ADAPTER}


def active() -> str:
  """Returns the target `tf.keras` resolves to now.

  Returns:
    `TF_KERAS` if `tf.keras` is tf_keras (TF_USE_LEGACY_KERAS=1), else
    `KERAS3`.
  """
  # TF's lazy loader resolves `tf.keras` once, from TF_USE_LEGACY_KERAS and
  # what is installed. Its module name may be `tensorflow.keras` (an import
  # statement re-executed Keras' API files under that name), so the package
  # defining its `Model` tells which Keras it is.
  model = getattr(tf.keras, "Model", None)
  name = getattr(model, "__module__", None) or ""
  return TF_KERAS if name.split(".")[0] == "tf_keras" else KERAS3


def current() -> KerasTarget:
  """The active target's adapter (`active()`)."""
  return _ADAPTERS[active()]


def get(name: str) -> KerasTarget:
  """The adapter of target `name` (`KERAS3` or `TF_KERAS`), active or not.

  Raises:
    ValueError: For another name.
  """
  if name not in _ADAPTERS:
    raise ValueError(f"name must be one of {sorted(_ADAPTERS)}, got {name!r}.")
  return _ADAPTERS[name]


def adapters() -> list[KerasTarget]:
  """Both adapters, Keras 3's first: for recognising objects of either."""
  return list(_ADAPTERS.values())


def patched() -> list[KerasTarget]:
  """The adapters whose hooks `install()` applies, in order.

  Keras 3's always (the package's own classes are Keras 3 ones, and `keras`
  stays importable next to tf_keras), then the active target's if another.
  """
  return [_keras3.ADAPTER] + (
      [current()] if active() != KERAS3 else [])


def select_tf_keras() -> None:
  """Makes `tf.keras` tf_keras, as `TF_USE_LEGACY_KERAS=1` would have.

  Sets the variable for the rest of the process (and the processes it
  starts); see `targets.tf_keras.select.select_tf_keras`.

  Raises:
    ImportError: tf_keras is not installed (the message names the `pip`
      command).
    RuntimeError: `tf.keras` already resolved to Keras 3 in this process.
  """
  # pylint: disable-next=g-import-not-at-top
  from tf_mixed_precision_compat.targets.tf_keras import select
  select.select_tf_keras()
