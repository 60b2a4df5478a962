"""Which Keras `tf.keras` is: the one place the package decides its target.

Two targets share one code base:

* `KERAS3` (the default on TF 2.16+): `tf.keras` is Keras 3; the Keras
  classes are those of `optimizers/` and `policy`.
* `TF_KERAS` (`TF_USE_LEGACY_KERAS=1` with `tf_keras` installed): `tf.keras`
  is tf_keras 2.x, which still has TF 2.4's mixed-precision design; the Keras
  classes are the thin ones of `tf_keras_target`, built on tf_keras's own.

Everything target-independent (the TF1 loss scales, the graph rewrite, the
`tf.compat.v1` optimizer) is shared. `install()` asks `keras_symbol` for the
class to graft at each Keras endpoint.

Example:

>>> active() in (KERAS3, TF_KERAS)
True
"""

import importlib
import types
from typing import Any, Optional

import tensorflow as tf

__all__ = ["KERAS3", "TF_KERAS", "active", "keras_symbol", "target_module"]

KERAS3 = "keras3"
TF_KERAS = "tf_keras"


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


def target_module() -> Optional[types.ModuleType]:
  """Returns the module holding the active target's Keras classes, or None.

  Returns:
    `tf_keras_target` for `TF_KERAS`; None for `KERAS3`, whose classes are the
    registered endpoints themselves.
  """
  if active() == TF_KERAS:
    return importlib.import_module(f"{__package__}.tf_keras_target")
  return None


def keras_symbol(symbol: Any) -> Any:
  """Returns what to graft for a registered endpoint `symbol` on this target.

  Args:
    symbol: A registered endpoint symbol (Keras 3 target).

  Returns:
    The active target's replacement for a Keras endpoint, else `symbol`.
  """
  module = target_module()
  if module is None:
    return symbol
  return module.REPLACEMENTS.get(_key(symbol), symbol)


def _key(symbol):
  return f"{symbol.__module__.rpartition('.')[2]}.{symbol.__name__}"
