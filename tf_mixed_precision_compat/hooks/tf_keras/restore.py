"""TF 2.2-2.4 optimizer checkpoints, read into tf_keras's current optimizers
(docs/architecture.md, "The tf_keras target")."""

import functools
import os
import weakref
from typing import Any

import tensorflow as tf
import tf_keras

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.legacy import _deferred
from tf_mixed_precision_compat.optimizers import _keras2_config

# Hyperparameter variables of TF 2.x optimizers that current optimizers keep
# as Python floats of the same name.
_FLOAT_HYPERS = ("beta_1", "beta_2", "momentum", "rho", "learning_rate_power",
                 "l1_regularization_strength", "l2_regularization_strength",
                 "l2_shrinkage_regularization_strength", "beta")

# Slot restorations waiting for an unbuilt optimizer, by optimizer.
_pending: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# The hyperparameter stand-ins handed out, by optimizer (TF may look a name
# up more than once and must get the same object).
_hypers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def inner(optimizer):
  """The optimizer holding the state (a loss-scale optimizer's inner one)."""
  return getattr(optimizer, "inner_optimizer", optimizer)


def current_names(optimizer):
  """TF 2.x slot name -> the name `optimizer`'s tf_keras class uses."""
  name = next((k.__name__ for k in type(optimizer).__mro__
               if getattr(tf_keras.optimizers, k.__name__, None) is k),
              type(optimizer).__name__)
  return _keras2_config.TF_KERAS_SLOT_NAMES.get(name, {})


def variables(optimizer):
  """An optimizer's variables (a method of OptimizerV2, a list otherwise)."""
  variables = optimizer.variables
  return variables() if callable(variables) else variables


def current_slots(optimizer, variable, tf2_name):
  """The slot variables of `optimizer` a TF 2.x slot `tf2_name` can be."""
  if hasattr(optimizer, "get_slot_names"):
    try:
      return [optimizer.get_slot(variable, tf2_name)]
    except KeyError:
      return []
  current = current_names(optimizer).get(tf2_name)
  wanted = f"{current}/{variable.name}"
  found = [v for v in variables(optimizer) if v.name == wanted]
  if found:
    return found
  # Built under a name scope, e.g. "while/m/..." when the first step runs in
  # a `tf.range` loop of a `tf.function`.
  return [v for v in variables(optimizer)
          if v.name.endswith("/" + wanted) and v.shape == variable.shape]


def _find_slot(optimizer, variable, tf2_name):
  found = current_slots(optimizer, variable, tf2_name)
  if len(found) != 1:
    wanted = f"{current_names(optimizer)[tf2_name]}/{variable.name}"
    raise ValueError(
        f"Restoring a TF 2.x checkpoint: optimizer '{optimizer.name}' has "
        f"{len(found)} slot variables named {wanted!r}, expected one.")
  return found[0]


class _Hyperparameter(tf.__internal__.tracking.Trackable):
  """Receives a TF 2.x hyperparameter variable's value from a checkpoint."""

  def __init__(self, optimizer, name):
    self._optimizer, self._name, self._warned = optimizer, name, False

  def _serialize_to_tensors(self):
    value = getattr(self._optimizer, self._name, 0.0)
    return {"VARIABLE_VALUE": tf.constant(
        float(value) if value is not None else 0.0)}

  def _restore_from_tensors(self, restored_tensors):
    value = float(restored_tensors["VARIABLE_VALUE"])
    if self._name != "decay":
      setattr(self._optimizer, self._name, value)
    elif value and not self._warned:
      self._warned = True  # TF may hand the value over twice.
      tf.get_logger().warning(
          "Restoring a TF 2.x checkpoint into optimizer '%s': its decay "
          "(%.7g) is not restored, as tf_keras's current optimizer classes "
          "have no decay; use a learning-rate schedule, or "
          "tf.keras.optimizers.legacy.%s, to keep it.",
          self._optimizer.name, value, type(self._optimizer).__name__)
    return tf.no_op()


def _stand_in(optimizer, name):
  by_name = _hypers.setdefault(optimizer, {})
  if name not in by_name:
    by_name[name] = _Hyperparameter(optimizer, name)
  return by_name[name]


def wrap_lookup_dependency(original):
  """tf_keras `Optimizer._lookup_dependency`, also resolving TF 2.x names."""

  def _lookup_dependency(self, name, cached_dependencies=None):
    found = original(self, name, cached_dependencies)
    if found is not None:
      return found
    if name == "iter":
      _from_tf2x.add(self)
      return self.iterations
    if name == "learning_rate" and isinstance(self.learning_rate,
                                              tf.Variable):
      return self.learning_rate
    if name == "base_optimizer":
      return self
    if name == "decay" or (name in _FLOAT_HYPERS and
                           isinstance(getattr(self, name, None),
                                      (int, float))):
      return _stand_in(self, name)
    return None

  return _lookup_dependency


# tf_keras current optimizers restored from a TF 2.x layout (whose `iter`
# was looked up).
_from_tf2x: "weakref.WeakSet[Any]" = weakref.WeakSet()


def derived_variables():
  """What a TF 2.x restore into tf_keras's current optimizers derives.

  A schedule's current-rate variable: TF 2.x had none (it evaluated the
  schedule at each step), and tf_keras sets it from the restored iterations
  at each step; no checkpoint value belongs to it.
  """
  found = (_private_api.tf_keras_current_learning_rate(o)
           for o in list(_from_tf2x))
  return [v for v in found if v is not None]


def wrap_status_check(original):
  """`CheckpointLoadStatus.assert_consumed` (or `..._matched`), counting
  `derived_variables()` as matched, as TF 2.4 had no such variables."""

  @functools.wraps(original)
  def check(self, *args, **kwargs):
    with _private_api.checkpoint_status_matches(self, derived_variables()):
      return original(self, *args, **kwargs)

  return check


def create_or_restore_slot_variable(self, slot_variable_position, slot_name,
                                    variable, **unused_kwargs):
  """tf_keras `Optimizer._create_or_restore_slot_variable` for TF 2.x slots:
  the slot TF restores, or None once its restore waits for the build."""
  check_slot_value(self, slot_variable_position, slot_name, variable)
  optimizer = inner(self)
  names = current_names(optimizer)
  if slot_name not in names:
    raise ValueError(
        f"Restoring a TF 2.x checkpoint: its slot {slot_name!r} has no "
        f"counterpart in tf_keras's {type(optimizer).__name__} (which "
        f"keeps {sorted(set(names.values())) or 'no slots'}). Use "
        f"tf.keras.optimizers.legacy.{type(optimizer).__name__} to "
        "restore it.")
  if _private_api.tf_keras_optimizer_is_built(optimizer):
    return _find_slot(optimizer, variable, slot_name)
  waiting = _pending.get(optimizer)
  if waiting is None:
    waiting = _pending[optimizer] = []

    def restore_waiting():
      for position, var, name in _pending.pop(optimizer, []):
        position.restore(_find_slot(optimizer, var, name))

    _deferred.on_build(optimizer, restore_waiting)
  waiting.append((slot_variable_position, variable, slot_name))
  return None


def check_slot_value(optimizer, position, slot_name, variable):
  """Raises `ValueError` unless a checkpoint's slot fits its variable.

  TF hands a slot over before it assigns anything, so refusing it here
  leaves everything as it was (TF 2.4's behaviour; tf_keras would fail after
  assigning the weights); what the restore left waiting is dropped.
  """
  problem = None
  shape = position.value_shape()
  dtype = _private_api.checkpoint_position_dtype(position)
  want_dtype = tf.as_dtype(variable.dtype).base_dtype
  if shape is not None and tuple(shape) != tuple(variable.shape):
    problem = (f"has shape {tuple(shape)}, the variable "
               f"{tuple(variable.shape)}")
  elif dtype is not None and tf.as_dtype(dtype) != want_dtype:
    problem = (f"has dtype {tf.as_dtype(dtype).name}, the variable "
               f"{want_dtype.name}")
  if problem is None:
    return
  for obj in {id(optimizer): optimizer,
              id(inner(optimizer)): inner(optimizer)}.values():
    _private_api.deferred_dependencies(obj).clear()
    _pending.pop(obj, None)
  raise ValueError(
      f"Restoring a checkpoint: its slot {slot_name!r} of variable "
      f"{variable.name!r} {problem}; nothing was restored (is it the same "
      "model?).")


def wrap_v2_create_or_restore_slot_variable(original):
  """OptimizerV2's `_create_or_restore_slot_variable`, checking the value."""

  @functools.wraps(original)
  def _create_or_restore_slot_variable(self, slot_variable_position,
                                       slot_name, variable, *args, **kwargs):
    check_slot_value(self, slot_variable_position, slot_name, variable)
    return original(self, slot_variable_position, slot_name, variable,
                    *args, **kwargs)

  return _create_or_restore_slot_variable


def build_slots(optimizer, variables):
  """Creates the inner optimizer's slots for `variables` now."""
  optimizer = inner(optimizer)
  if not _private_api.tf_keras_v2_create_slots(optimizer, variables):
    optimizer.build(variables)  # A current-family optimizer.


def restore_saved_model_optimizer(model, path):
  """Restores the optimizer state of a TF 2.x Keras SavedModel into `model`
  (tf_keras, like TF 2.4, rebuilds the optimizer fresh from its config)."""
  build_slots(model.optimizer, model.trainable_variables)
  status = tf.train.Checkpoint(root=model).read(
      os.path.join(path, "variables", "variables"))
  # What stays unmatched is Keras bookkeeping of the file (its `keras_api`
  # metrics); every variable of the model and optimizer must be restored.
  status.expect_partial()
  status.assert_existing_objects_matched()
