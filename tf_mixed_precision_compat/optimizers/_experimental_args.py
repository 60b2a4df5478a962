"""TF 2.3's `loss_scale` argument, as TF 2.4's non-experimental arguments.

Used by the experimental `LossScaleOptimizer` of both targets, with the
deprecation message TF 2.4 logged for each kind of loss scale.

Example:

>>> tf23_config_arguments({"class_name": "FixedLossScale",
...                        "config": {"loss_scale_value": 128.0}})
{'dynamic': False, 'initial_scale': 128.0}
"""

import tensorflow as tf

from tf_mixed_precision_compat import loss_scale as loss_scale_module
from tf_mixed_precision_compat.loss_scale import dynamic_state

# TF 2.4's LossScaleOptimizer defaults.
DEFAULT_INITIAL_SCALE = 2**15
DEFAULT_GROWTH_STEPS = 2000
V1_WARNING_PREFIX = (
    "tf.keras.mixed_precision.experimental.LossScaleOptimizer is deprecated. "
    "Please use tf.keras.mixed_precision.LossScaleOptimizer instead. ")
_EXAMPLE = ("For example\n"
            "  opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer("
            "opt{})")


def _fixed_types():
  return (loss_scale_module.FixedLossScale,
          tf.compat.v1.mixed_precision.FixedLossScale)


def _dynamic_types():
  return (loss_scale_module.DynamicLossScale,
          tf.compat.v1.mixed_precision.DynamicLossScale)


def _fixed_value(loss_scale):
  # Neither our FixedLossScale nor TF's compat.v1 one has a public getter;
  # both record the value in their config.
  return loss_scale.get_config()["loss_scale_value"]


def v1_arguments(loss_scale):
  """The non-experimental arguments equal to a TF 2.3 `loss_scale`.

  Args:
    loss_scale: As `LossScaleOptimizerV1`'s argument.

  Returns:
    `(kwargs, message)`: the keyword arguments of the non-experimental
    `LossScaleOptimizer` and the deprecation message TF 2.4 logged.

  Raises:
    TypeError: For a `LossScale` neither fixed nor dynamic.
    ValueError: For a dynamic multiplier other than 2, or any other value.
  """
  if isinstance(loss_scale, dict):
    loss_scale = loss_scale_module.deserialize(loss_scale)
  if isinstance(loss_scale, (int, float)) and not isinstance(loss_scale, bool):
    value = loss_scale
  elif isinstance(loss_scale, _fixed_types()):
    value = _fixed_value(loss_scale)
  elif isinstance(loss_scale, str) and loss_scale == "dynamic":
    return {}, V1_WARNING_PREFIX + _EXAMPLE.format("")
  elif isinstance(loss_scale, _dynamic_types()):
    return _dynamic_arguments(loss_scale)
  elif isinstance(loss_scale, (loss_scale_module.LossScale,
                               tf.compat.v1.mixed_precision.LossScale)):
    raise TypeError("Passing a LossScale that is not a FixedLossScale or a "
                    f"DynamicLossScale is no longer supported. Got: "
                    f"{loss_scale}")
  else:
    raise ValueError("Invalid value passed to loss_scale. loss_scale "
                     'must be the string "dynamic" (recommended), an int, '
                     "a float, a FixedLossScale, or a DynamicLossScale. Got "
                     f"value: {loss_scale}")
  kwargs = {"dynamic": False, "initial_scale": value}
  return kwargs, V1_WARNING_PREFIX + _EXAMPLE.format(
      f", dynamic=False, initial_scale={value}")


def _dynamic_arguments(loss_scale):
  if loss_scale.multiplier != 2:
    raise ValueError('When passing a DynamicLossScale to "loss_scale", '
                     "DynamicLossScale.multiplier must be 2. Got: "
                     f"{loss_scale}")
  kwargs = {}
  if loss_scale.initial_loss_scale != DEFAULT_INITIAL_SCALE:
    kwargs["initial_scale"] = loss_scale.initial_loss_scale
  if loss_scale.increment_period != DEFAULT_GROWTH_STEPS:
    kwargs["dynamic_growth_steps"] = loss_scale.increment_period
  extra = "".join(f", {k}={v}" for k, v in kwargs.items())
  message = (V1_WARNING_PREFIX +
             "Note that the non-experimental LossScaleOptimizer does not take "
             "a DynamicLossScale but instead takes the dynamic configuration "
             "directly in the constructor. For example:\n"
             "  opt = tf.keras.mixed_precision.experimental."
             f"LossScaleOptimizer(opt{extra})\n")
  return kwargs, message


def fixed_scale(loss_scale):
  """The value of a `FixedLossScale` (ours or TF's), else None.

  Args:
    loss_scale: A `LossScale`.

  Returns:
    A Python float, or None for any other loss scale.
  """
  if isinstance(loss_scale, _fixed_types()):
    return float(_fixed_value(loss_scale))
  return None


def initial_scale(loss_scale):
  """TF 2.4's `initial_scale` of a TF 2.3 `LossScale`.

  Args:
    loss_scale: A `LossScale`.

  Returns:
    The fixed or initial scale, or None for a user `LossScale` without an
    `initial_loss_scale`.
  """
  fixed = fixed_scale(loss_scale)
  if fixed is not None:
    return fixed
  return getattr(loss_scale, "initial_loss_scale", None)


def good_steps_counter(loss_scale):
  """TF 2.4's `dynamic_counter` of a TF 2.3 `LossScale`, or None.

  Args:
    loss_scale: A `LossScale`.

  Returns:
    A dynamic loss scale's good-steps variable, else None.
  """
  if isinstance(loss_scale, dynamic_state.DynamicScaleCore):
    return dynamic_state.counter_variable(loss_scale)
  return getattr(loss_scale, "_num_good_steps", None)


def _loss_scale_types():
  return (loss_scale_module.LossScale, tf.compat.v1.mixed_precision.LossScale)


def tf24_representable(loss_scale):
  """Whether TF 2.4's non-experimental arguments can express `loss_scale`.

  Args:
    loss_scale: A `LossScale`.

  Returns:
    True for a `FixedLossScale` and a `DynamicLossScale` of multiplier 2.
  """
  if isinstance(loss_scale, _fixed_types()):
    return True
  return (isinstance(loss_scale, _dynamic_types()) and
          loss_scale.multiplier == 2)


def tf23_loss_scale(loss_scale, custom_objects=None):
  """The `LossScale` TF 2.3's experimental class holds for `loss_scale`.

  TF 2.3.4 took any `LossScale`; TF 2.4 refused those its non-experimental
  arguments cannot express (a `DynamicLossScale` whose multiplier is not 2,
  a user's own subclass). The experimental class follows TF 2.3: it keeps
  the object itself.

  Args:
    loss_scale: As `LossScaleOptimizerV1`'s argument (also a serialized
      loss scale dict).
    custom_objects: Optional classes, by name, for a serialized user
      `LossScale`.

  Returns:
    `(loss_scale, message)`: the `LossScale` (the one passed, or the one
    "dynamic", a number or a dict stands for) and the deprecation message
    to log.

  Raises:
    ValueError: For a value that is neither a `LossScale`, "dynamic", a
      number nor a serialized loss scale.
  """
  if isinstance(loss_scale, dict):
    loss_scale = loss_scale_module.deserialize(loss_scale, custom_objects)
  if (isinstance(loss_scale, _loss_scale_types()) and
      not tf24_representable(loss_scale)):
    if isinstance(loss_scale, _dynamic_types()):
      # TF's own tf.compat.v1 class takes a scale float32 cannot hold.
      dynamic_state.check_initial_scale(loss_scale.initial_loss_scale,
                                        "initial_loss_scale")
    return loss_scale, (
        V1_WARNING_PREFIX + "The non-experimental LossScaleOptimizer cannot "
        f"express {loss_scale!r}; the experimental one uses it as TF 2.3 "
        "did.")
  kwargs, message = v1_arguments(loss_scale)
  if "initial_scale" in kwargs:
    # As the non-experimental constructor checks it (TF's tf.compat.v1
    # classes take a scale float32 cannot hold).
    dynamic_state.check_initial_scale(kwargs["initial_scale"], "initial_scale")
  return loss_scale_module.get(loss_scale), message


def tf23_config_arguments(serialized):
  """TF 2.4 constructor arguments equivalent to a TF 2.3 config's loss scale.

  Args:
    serialized: The `loss_scale` entry of a TF 2.3 `LossScaleOptimizer`
      config.

  Returns:
    `{"dynamic", "initial_scale"}`, plus `"dynamic_growth_steps"` when
    dynamic.

  Raises:
    ValueError: For a dynamic multiplier other than 2, or a loss scale
      neither fixed nor dynamic.
  """
  loss_scale = loss_scale_module.deserialize(serialized)
  if isinstance(loss_scale, _fixed_types()):
    return {
        "dynamic": False,
        "initial_scale": _fixed_value(loss_scale)
    }
  if isinstance(loss_scale, _dynamic_types()):
    if loss_scale.multiplier != 2:
      raise ValueError("Cannot deserialize LossScaleOptimizer with a "
                       "DynamicLossScale whose multiplier is not 2. Got "
                       f"DynamicLossScale: {loss_scale}")
    return {
        "dynamic": True,
        "initial_scale": loss_scale.initial_loss_scale,
        "dynamic_growth_steps": loss_scale.increment_period,
    }
  raise ValueError(
      "Serialized LossScaleOptimizers with a LossScale that is neither a "
      "FixedLossScale nor a DynamicLossScale can no longer be deserialized")
