"""TF 2.4's `optimizer.weights` list, for a Keras 3 inner optimizer.

`[iterations] + slots` in the order TF 2.4's optimizer created them (recorded
with TF 2.4.4 by tools/gen_tf24_weights_lists.py), so lists a TF 2.4 job
saved with `get_weights()` load with `set_weights()`.

Example:

>>> from tf_mixed_precision_compat import LossScaleOptimizer
>>> opt = LossScaleOptimizer(tf.keras.optimizers.Adam())
>>> var = tf.Variable([1.0])
>>> _ = opt.apply_gradients([(tf.constant([0.5]), var)])
>>> [w.shape.rank for w in opt.weights]  # iterations, m, v
[0, 1, 1]
"""

import numpy as np
import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.optimizers import _keras2_config

# Optimizers whose TF 2.4 `_create_slots` looped over variables outermost.
_VARIABLE_MAJOR = ("Ftrl",)
# Non-slot variables TF 2.4 listed after `iterations`: (name, getter).
_EXTRA_WEIGHTS = {
    "Nadam": (("momentum_cache", _private_api.keras_nadam_u_product),)
}


def _named_variable(optimizer, name):
  for variable in optimizer.variables:
    if variable.name == name or variable.name.endswith("/" + name):
      return variable
  return None


def layout(adapter):
  """`(TF 2.4's name, variable)` of a wrapped Keras 3 optimizer's weights."""
  optimizer = adapter.optimizer
  entries = [("iterations", adapter.iterations_variable())]
  class_name = _keras2_config.keras_class_name(optimizer)
  for tf24_name, getter in _EXTRA_WEIGHTS.get(class_name, ()):
    variable = getter(optimizer)
    if variable is not None:
      entries.append((tf24_name, variable))
  names = _keras2_config.TF2_SLOT_NAMES.get(class_name)
  variables = list(adapter.built_variables() or [])
  if names is None:  # A user class: Keras 3's own order, minus the rest.
    known = {id(v) for _, v in entries}
    known.add(id(_named_variable(optimizer, "learning_rate")))
    return entries + [(v.name, v) for v in optimizer.variables
                      if id(v) not in known]
  pairs = ([(var, n) for var in variables for n in names]
           if class_name in _VARIABLE_MAJOR else
           [(var, n) for n in names for var in variables])
  for var, tf24_name in pairs:
    try:
      slot = adapter.get_slot(var, tf24_name)
    except KeyError:  # Not made with these arguments (SGD without momentum).
      continue
    entries.append((f"{var.name.split(':')[0]}/{tf24_name}", slot))
  return entries


def describe(entries):
  """`[iterations (), kernel/m (3, 2), ...]`, for error messages."""
  return "[" + ", ".join(f"{name} {tuple(v.shape)}"
                         for name, v in entries) + "]"


def set_values(entries, weights):
  """Assigns `weights` to `layout` `entries`, raising before any mismatch."""
  weights = list(weights)
  if len(weights) != len(entries):
    raise ValueError(
        f"set_weights(weights) got a list of {len(weights)} arrays, but this "
        f"optimizer's weights are {len(entries)}, in TF 2.4's layout "
        f"[iterations] + slots: {describe(entries)}.")
  values = [np.asarray(w) for w in weights]
  for (name, variable), value in zip(entries, values):
    if tuple(value.shape) != tuple(variable.shape):
      raise ValueError(
          f"set_weights(weights): the array for {name} has shape "
          f"{tuple(value.shape)}, expected {tuple(variable.shape)}. The "
          f"layout is TF 2.4's [iterations] + slots: {describe(entries)}.")
  for (_, variable), value in zip(entries, values):
    variable.assign(tf.cast(value, variable.dtype))
