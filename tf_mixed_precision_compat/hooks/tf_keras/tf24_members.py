"""TF 2.4's members of a loss-scale optimizer around tf_keras's current ones.

tf_keras's current optimizer classes (TF 2.11's) dropped `OptimizerV2`
members that TF 2.3/2.4 jobs call on their loss-scale optimizer, and so did
tf_keras's `LossScaleOptimizerV3` that wraps them: `get_slot(var, "m")`,
`weights` / `get_weights()` / `set_weights()` in TF 2.4's layout
(`[iterations] + slots`, each slot kind in turn), `clipnorm` / `clipvalue` /
`global_clipnorm`, and hyperparameters read through the wrapper
(`opt.momentum`). `MEMBERS` gives them back, with TF 2.x's slot names, as
the Keras 3 target's class has them; `patches.install` adds those the class
does not define itself, through `install()`'s journal. Not `get_slot_names`:
TF's checkpoint code takes an object having one for an `OptimizerV2` and
would save each slot (already the wrapped optimizer's variable) twice.
"""

import numpy as np

from tf_mixed_precision_compat.hooks.tf_keras import restore
from tf_mixed_precision_compat.optimizers import _keras2_config
from tf_mixed_precision_compat.optimizers import _tf24_weights

# TF 2.4 listed these optimizers' slots variable by variable, not kind by kind.
_VARIABLE_MAJOR = ("Ftrl",)


def _inner(self):
  return self.__dict__.get("_optimizer")


def _slot_names(inner):
  """TF 2.x slot name -> tf_keras's, for `inner`'s class, in TF 2.x order."""
  return restore.current_names(inner)


def _kind_at(name, current):
  """Where slot name `current` starts a path component of `name`, or None."""
  if name.startswith(current + "/"):
    return 0
  found = name.find(f"/{current}/")
  return None if found < 0 else found + 1


def _slots_of_kind(inner, current):
  """`inner`'s slot variables of tf_keras slot name `current`, in order.

  A slot's kind is the slot name that comes first in its variable name
  (`m/v/kernel` is an `m` slot of a layer named `v`; a name scope such as
  `while/` may come before it).
  """
  names = list(_slot_names(inner).values())
  out = []
  for v in restore.variables(inner):
    at = {c: _kind_at(v.name, c) for c in names}
    found = [c for c in names if at[c] is not None]
    if current in found and min(found, key=lambda c: at[c]) == current:
      out.append(v)
  return out


def get_slot(self, var, slot_name):
  """The slot `slot_name` (a TF 2.x name: "m", "momentum", ...) of `var`."""
  inner = _inner(self)
  current = _slot_names(inner).get(slot_name)
  found = restore.current_slots(inner, var, slot_name) if current else []
  if len(found) != 1:
    made = [tf2 for tf2, current in _slot_names(inner).items()
            if _slots_of_kind(inner, current)]
    raise KeyError(
        f"No slot {slot_name!r} for variable {var.name!r}; slots: {made}.")
  return found[0]


def _layout(self):
  inner = _inner(self)
  kinds = [_slots_of_kind(inner, current)
           for current in _slot_names(inner).values()]
  if _keras2_config.keras_class_name(inner) in _VARIABLE_MAJOR:
    slots = [v for group in zip(*kinds) for v in group]
  else:
    slots = [v for kind in kinds for v in kind]
  return [("iterations", inner.iterations)] + [(v.name, v) for v in slots]


def weights(self):
  """TF 2.4's `[iterations] + slots` (each slot kind in turn)."""
  return [v for _, v in _layout(self)]


def get_weights(self):
  """The values of `weights`, as NumPy arrays."""
  return [np.asarray(v.numpy()) for v in weights(self)]


def set_weights(self, weights_list):
  """Assigns a `get_weights()` list (TF 2.4's layout), checking it first."""
  _tf24_weights.set_values(_layout(self), weights_list)


def _delegated(name):
  def getter(self):
    return getattr(_inner(self), name)

  def setter(self, value):
    inner = _inner(self)
    if inner is not None:  # tf_keras's constructor may set it first.
      setattr(inner, name, value)

  return property(getter, setter, doc=f"The wrapped optimizer's {name}.")


def hyperparameter(self, name):
  """`__getattr__`: the wrapped optimizer's TF 2.x hyperparameters."""
  inner = _inner(self)
  if (inner is not None and name != "learning_rate" and
      name in _keras2_config.hyperparameter_names(inner)):
    return getattr(inner, name)
  raise AttributeError(
      f"'{type(self).__name__}' object has no attribute '{name}'")


MEMBERS = {
    "get_slot": get_slot,
    "weights": property(weights, doc=weights.__doc__),
    "get_weights": get_weights,
    "set_weights": set_weights,
    "clipnorm": _delegated("clipnorm"),
    "clipvalue": _delegated("clipvalue"),
    "global_clipnorm": _delegated("global_clipnorm"),
    "__getattr__": hyperparameter,
}
