"""A dynamic loss scale's state, as TF 2.4's Keras LossScaleOptimizer kept it.

`DynamicLossScaleState` is TF 2.4's `_DynamicLossScaleState` (checkpointed as
`loss_scale/{current_loss_scale,good_steps}`); `DynamicScaleCore` is its
implementation, shared with TF 2.3's `DynamicLossScale`, and the argument
checks both use.
"""

import math
import numbers

import numpy as np
import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.loss_scale import _distribute
from tf_mixed_precision_compat.loss_scale import _scaling
from tf_mixed_precision_compat.loss_scale import _tracking

__all__ = [
    "DynamicScaleCore", "check_float32_finite", "check_growth_steps",
    "check_initial_scale", "check_multiplier", "is_real", "update_variables"
]

# float32's largest finite value; values above round to inf (those a little
# above that still round down to it, but none is a sensible loss scale).
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def is_real(value):
  """Whether `value` is a real number (Python or NumPy), not a bool."""
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_initial_scale(value, arg_name):
  """`value` as a float, finite (also in float32) and at least 1, or raises.

  TypeError for a type `float()` rejects (as TF 2.4 raised), else ValueError.
  """
  if not is_real(value):
    message = (f'"{arg_name}" must be a Python int or float, finite and at '
               f"least 1, but got: {value!r}")
    try:
      float(value)
    except TypeError:
      raise TypeError(message) from None
    except ValueError:
      pass
    raise ValueError(message)
  value = float(value)
  if not math.isfinite(value) or value < 1:
    raise ValueError(f'"{arg_name}" must be finite and at least 1, but got: '
                     f"{value}")
  check_float32_finite(value, arg_name)
  return value


def check_float32_finite(value, arg_name):
  """Raises ValueError if the float `value` overflows to inf as a float32.

  The scale is applied as a float32, where e.g. 1e39 is inf and a dynamic
  scale of inf skips every step.
  """
  if abs(value) > _FLOAT32_MAX:
    raise ValueError(
        f'"{arg_name}" must be finite as a float32 (at most {_FLOAT32_MAX:.8g},'
        f" the loss scale's dtype), but got: {value}")


def check_growth_steps(value, arg_name):
  """`value` as an int if integral and at least 1, else raises ValueError."""
  if not is_real(value) or not math.isfinite(value) or value != int(value):
    raise ValueError(f'"{arg_name}" must be an integer of at least 1, but '
                     f"got: {value!r}")
  if value < 1:
    raise ValueError(f'"{arg_name}" must be at least 1, but got: {value!r}')
  return int(value)


def check_multiplier(value, arg_name="multiplier"):
  """`value` as a float if finite and greater than 1, else raises ValueError."""
  if not is_real(value) or not math.isfinite(value) or value <= 1:
    raise ValueError(f'"{arg_name}" must be a finite number greater than 1, '
                     f"but got: {value!r}")
  return float(value)


def update_variables(scale, counter, grads, growth_steps, multiplier):
  """One step of dynamic loss scaling, applied to `scale` and `counter`.

  Returns `(update_op, is_finite)`; `update_op` is None eagerly, else, as
  TF 2.4's conditional, a bool tensor running the update: whether the scale
  was due to grow.
  """
  if not tf.executing_eagerly():
    # TF 2.3/2.4 made this update a `tf.cond`, which took the op name "cond"
    # of the current name scope. Reserving it keeps the names of what is built
    # next as TF's: a v1 optimizer's conditional apply is then "cond_1", so
    # Adam's `cond_1/beta1_power`, which old `tf.compat.v1.train.Saver`
    # checkpoints name, is found again.
    tf.compat.v1.get_default_graph().unique_name("cond")
  is_finite = _distribute.all_finite(grads)
  new_scale, new_counter = _scaling.dynamic_update(
      scale, counter, is_finite, growth_steps, multiplier)
  assigns = [scale.assign(new_scale, read_value=False),
             counter.assign(new_counter, read_value=False)]
  if tf.executing_eagerly():
    return None, is_finite
  # On a finite step the counter restarts from 0 only when growth was due.
  grew = tf.logical_and(is_finite,
                        tf.equal(new_counter, tf.zeros_like(new_counter)))
  with tf.control_dependencies(assigns):
    update_op = tf.identity(grew)
  return update_op, is_finite


def counter_variable(scale):
  """The good-steps counter variable of a `DynamicScaleCore`, this context's.

  Found as its checkpoint dependency, so `DynamicLossScale` keeps exactly
  TF 2.3's API (which has no counter).
  """
  return _private_api.lookup_dependency(scale, "good_steps")


class DynamicScaleCore(_tracking.PerGraphWeights):
  """The one implementation of dynamic loss scaling, behind both TF APIs.

  Per-graph variables `current_loss_scale` and `good_steps` (TF 2.3/2.4's
  checkpoint names). Only private names live here, so neither face
  (`DynamicLossScaleState`, `DynamicLossScale`) shows the other's API.
  """

  # The name of the growth-steps argument in error messages.
  _growth_steps_arg = "growth_steps"

  def __init__(self, initial_loss_scale, growth_steps, multiplier):
    """Validates the arguments (see `check_*`) and creates the variables."""
    self._initial_loss_scale = check_initial_scale(initial_loss_scale,
                                                   "initial_loss_scale")
    self._growth_steps = check_growth_steps(growth_steps,
                                            self._growth_steps_arg)
    self._multiplier = check_multiplier(multiplier)
    super().__init__()
    self._current_loss_scale = self._add_weight(
        name="current_loss_scale",
        initial_value=self._initial_loss_scale,
        dtype=tf.float32)
    # Steps with finite gradients since the last overflow or scale change.
    self._counter = self._add_weight(
        name="good_steps", initial_value=0, dtype=tf.int64)

  @property
  def initial_loss_scale(self):
    """The loss scale the state started from, a Python float."""
    return self._initial_loss_scale

  @property
  def multiplier(self):
    """The growth and shrink factor, a Python float."""
    return self._multiplier

  def __call__(self):
    """Returns the current loss scale as a scalar float32 tensor."""
    return tf.convert_to_tensor(self._current_loss_scale)

  def update(self, grads):
    """Updates the scale and counter from one step's gradients.

    Under a strategy, call it in cross-replica context: one overflowing
    replica makes the step non-finite everywhere.

    Args:
      grads: A nested structure of gradients (tensors, `tf.IndexedSlices`,
        None, or per-replica values in cross-replica context).

    Returns:
      `(update_op, should_apply_gradients)`: `update_op` is None eagerly,
      else a bool tensor running the update; `should_apply_gradients` is a
      scalar bool tensor, False when the step must be skipped.
    """
    return update_variables(self._current_loss_scale, self._counter, grads,
                            self._growth_steps, self._multiplier)

  def _state_repr(self, class_name, growth_name, counter_name):
    state = ""
    if tf.executing_eagerly():
      state = (f"current_loss_scale={self._current_loss_scale.numpy()}, "
               f"{counter_name}={self._counter.numpy()}, ")
    return (f"{class_name}({state}initial_loss_scale="
            f"{self._initial_loss_scale}, {growth_name}={self._growth_steps}, "
            f"multiplier={self._multiplier})")


class DynamicLossScaleState(DynamicScaleCore):
  """A dynamic loss scale: a scale, a counter of good steps, and their update.

  TF 2.4's `_DynamicLossScaleState` (its Keras `LossScaleOptimizer`'s
  `loss_scale`). Every `growth_steps` consecutive finite steps the scale is
  multiplied by `multiplier`, unless that overflows; a NaN or infinite
  gradient divides it by `multiplier` (never below 1) and resets the counter.

  Example:

  >>> state = DynamicLossScaleState(8., growth_steps=2, multiplier=2.)
  >>> _, should_apply = state.update([tf.constant(float("inf"))])
  >>> bool(should_apply), float(state())
  (False, 4.0)
  >>> for _ in range(2):
  ...   _ = state.update([tf.constant(1.)])
  >>> float(state()), int(state.counter)
  (8.0, 0)
  """

  @property
  def growth_steps(self):
    """Consecutive finite steps after which the scale grows, a Python int."""
    return self._growth_steps

  @property
  def current_loss_scale(self):
    """The loss scale variable (float32) of the current context."""
    return self._current_loss_scale

  @property
  def counter(self):
    """The good-steps counter variable (int64) of the current context."""
    return self._counter

  def __repr__(self):
    return self._state_repr("DynamicLossScaleState", "growth_steps",
                            "counter")
