"""TF 2.3's `loss_scale` argument, as TF 2.4's non-experimental arguments.

Used by the experimental `LossScaleOptimizer` of both targets, with the
deprecation message TF 2.4 logged for each kind of loss scale; their shared
properties and configs are `TF23LossScaleMixin`.

Example:

>>> tf23_config_arguments({"class_name": "FixedLossScale",
...                        "config": {"loss_scale_value": 128.0}})
{'dynamic': False, 'initial_scale': 128.0}
"""

from typing import Any, Callable, Optional

import tensorflow as tf

from tf_mixed_precision_compat import loss_scale as loss_scale_module
from tf_mixed_precision_compat.loss_scale import _loss_scales
from tf_mixed_precision_compat.loss_scale import dynamic_state
from tf_mixed_precision_compat.optimizers import _loss_scale_value

# TF 2.4's LossScaleOptimizer defaults.
DEFAULT_INITIAL_SCALE = 2**15
DEFAULT_GROWTH_STEPS = 2000
V1_WARNING_PREFIX = (
    "tf.keras.mixed_precision.experimental.LossScaleOptimizer is deprecated. "
    "Please use tf.keras.mixed_precision.LossScaleOptimizer instead. ")
_EXAMPLE = ("For example\n"
            "  opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer("
            "opt{})")


def _fixed_value(loss_scale):
  # Neither our FixedLossScale nor TF's compat.v1 one has a public getter;
  # both record the value in their config.
  return loss_scale.get_config()["loss_scale_value"]


def _v1_arguments(loss_scale):
  """`(kwargs, message)`: TF 2.4's arguments for a TF 2.3 `loss_scale`.

  `message` is the deprecation message TF 2.4 logged. What `tf23_loss_scale`
  passes on: a number, `"dynamic"` or a `tf24_representable` `LossScale`;
  ValueError for anything else.
  """
  if isinstance(loss_scale, (int, float)) and not isinstance(loss_scale, bool):
    value = loss_scale
  elif isinstance(loss_scale, _loss_scales.FIXED_TYPES):
    value = _fixed_value(loss_scale)
  elif isinstance(loss_scale, str) and loss_scale == "dynamic":
    return {}, V1_WARNING_PREFIX + _EXAMPLE.format("")
  elif isinstance(loss_scale, _loss_scales.DYNAMIC_TYPES):
    return _dynamic_arguments(loss_scale)
  else:
    raise ValueError("Invalid value passed to loss_scale. loss_scale "
                     'must be the string "dynamic" (recommended), an int, '
                     "a float, a FixedLossScale, or a DynamicLossScale. Got "
                     f"value: {loss_scale}")
  kwargs = {"dynamic": False, "initial_scale": value}
  return kwargs, V1_WARNING_PREFIX + _EXAMPLE.format(
      f", dynamic=False, initial_scale={value}")


def _dynamic_arguments(loss_scale):
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


def tf24_representable(loss_scale):
  """Whether TF 2.4's arguments express `loss_scale`: fixed, or multiplier 2."""
  if isinstance(loss_scale, _loss_scales.FIXED_TYPES):
    return True
  return (isinstance(loss_scale, _loss_scales.DYNAMIC_TYPES) and
          loss_scale.multiplier == 2)


def tf23_loss_scale(loss_scale):
  """`(LossScale, message)` TF 2.3's experimental class holds and logs.

  TF 2.3.4 kept any `LossScale`, also those TF 2.4's arguments cannot express
  (a multiplier not 2, a user subclass); so does this class.
  """
  if isinstance(loss_scale, dict):
    loss_scale = loss_scale_module.deserialize(loss_scale)
  # TF's tf.compat.v1 `LossScale` is registered as ours.
  if (isinstance(loss_scale, loss_scale_module.LossScale) and
      not tf24_representable(loss_scale)):
    if isinstance(loss_scale, _loss_scales.DYNAMIC_TYPES):
      # TF's own tf.compat.v1 class takes a scale float32 cannot hold.
      dynamic_state.check_initial_scale(loss_scale.initial_loss_scale,
                                        "initial_loss_scale")
    return loss_scale, (
        V1_WARNING_PREFIX + "The non-experimental LossScaleOptimizer cannot "
        f"express {loss_scale!r}; the experimental one uses it as TF 2.3 "
        "did.")
  kwargs, message = _v1_arguments(loss_scale)
  if "initial_scale" in kwargs:
    # As the non-experimental constructor checks it (TF's tf.compat.v1
    # classes take a scale float32 cannot hold).
    dynamic_state.check_initial_scale(kwargs["initial_scale"], "initial_scale")
  return loss_scale_module.get(loss_scale), message


def tf23_config_arguments(serialized):
  """TF 2.4 constructor arguments for a TF 2.3 config's `loss_scale`."""
  loss_scale = loss_scale_module.deserialize(serialized)
  if isinstance(loss_scale, _loss_scales.FIXED_TYPES):
    return {
        "dynamic": False,
        "initial_scale": _fixed_value(loss_scale)
    }
  if isinstance(loss_scale, _loss_scales.DYNAMIC_TYPES):
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


def deserialize_loss_scale(serialized, custom_objects, registered):
  """A serialized TF 2.3 loss scale; a user class found as Keras finds it.

  `registered` is the Keras target's `get_registered_object`, as TF 2.3's
  Keras also looked user classes up in scopes and registrations.
  """
  merged = dict(custom_objects or {})
  name = serialized.get("class_name") if isinstance(serialized, dict) else None
  if isinstance(name, str) and name not in merged:
    found = registered(name, custom_objects)
    if found is not None:
      merged[name] = found
  return loss_scale_module.deserialize(serialized, merged)


def tf23_only(config, custom_objects, registered):
  """Whether only TF 2.3's experimental class holds `config`'s loss scale."""
  return "loss_scale" in config and not tf24_representable(
      deserialize_loss_scale(config["loss_scale"], custom_objects,
                             registered))


class TF23LossScaleMixin:
  """TF 2.3's experimental `LossScaleOptimizer`, on either Keras's class.

  Each target's `LossScaleOptimizerV1` mixes it in before its Keras's
  `LossScaleOptimizer`: it takes TF 2.3's `loss_scale` argument, holds that
  `LossScale` and gives TF 2.4's properties and TF 2.3/2.4 configs from it.

  Example:

  >>> import keras
  >>> from tf_mixed_precision_compat.optimizers import (
  ...     experimental_loss_scale_optimizer as v1)
  >>> opt = v1.LossScaleOptimizerV1(keras.optimizers.SGD(), 128)
  >>> opt.dynamic, opt.initial_scale, opt.get_config()["initial_scale"]
  (False, 128.0, 128.0)
  """

  _tf23_loss_scale: Any
  # Each class's own: keep the `LossScale` where its base class's step
  # finds it, its inner optimizer's config, an optimizer from a config's
  # parts, and its Keras's registry lookup.
  _hold: Callable[[Any], None]
  _serialized_inner: Callable[[], Any]
  _from_parts: Callable[..., Any]
  _registered_object: Callable[..., Any]

  def __init__(self, optimizer: Any, loss_scale: Any) -> None:
    """Wraps `optimizer` with the loss scaling `loss_scale` describes.

    Args:
      optimizer: The optimizer to wrap (of the target's Keras).
      loss_scale: `"dynamic"`; an int or float (a fixed scale); any
        `LossScale` (ours, TF's `tf.compat.v1` ones or a user subclass),
        which the optimizer then uses and updates; or a serialized loss scale
        dict.

    Raises:
      ValueError: For any other `loss_scale`, or as `LossScaleOptimizer`.
      TypeError: As `LossScaleOptimizer`.
    """
    resolved, message = tf23_loss_scale(loss_scale)
    # The base class checks the optimizer; the scale it would hold is
    # replaced by the TF 2.3 `LossScale`.
    super().__init__(  # type: ignore[call-arg]
        optimizer, dynamic=False, initial_scale=1.)
    self._tf23_loss_scale = resolved
    self._hold(resolved)
    tf.get_logger().warning(message)

  @property
  def loss_scale(self) -> Any:
    """The `LossScale`, which is also the scale read now, as a tensor.

    TF 2.3 code calls it (`opt.loss_scale()`: the scale at the call) or uses
    its methods; TF 2.4 code uses it as the float32 scalar tensor TF 2.4's
    property read (`float(opt.loss_scale)`, `opt.loss_scale * 2`: the scale
    when the property was read, also after later steps).
    """
    return _loss_scale_value.LossScaleValue(self._tf23_loss_scale)

  @property
  def dynamic(self) -> bool:
    """Whether the loss scale may change (any but a `FixedLossScale`)."""
    return not isinstance(self._tf23_loss_scale, _loss_scales.FIXED_TYPES)

  @property
  def initial_scale(self) -> Any:
    """The fixed or initial loss scale, or None for a user `LossScale`."""
    if not self.dynamic:
      return float(_fixed_value(self._tf23_loss_scale))
    return getattr(self._tf23_loss_scale, "initial_loss_scale", None)

  @property
  def dynamic_growth_steps(self) -> Optional[int]:
    """A `DynamicLossScale`'s `increment_period`, else None."""
    return getattr(self._tf23_loss_scale, "increment_period", None)

  @property
  def dynamic_counter(self) -> Optional[tf.Variable]:
    """A `DynamicLossScale`'s good-steps counter, else None."""
    if isinstance(self._tf23_loss_scale, dynamic_state.DynamicScaleCore):
      return dynamic_state.counter_variable(self._tf23_loss_scale)
    return getattr(self._tf23_loss_scale, "_num_good_steps", None)

  def get_config(self) -> dict[str, Any]:
    """TF 2.4's config where it can express the loss scale, else TF 2.3's.

    Returns:
      `{"inner_optimizer", "dynamic", "initial_scale",
      "dynamic_growth_steps"}` (as TF 2.4.4's experimental class) for a
      fixed scale or a `DynamicLossScale` of multiplier 2; otherwise TF
      2.3.4's `{"optimizer", "loss_scale"}`.
    """
    if tf24_representable(self._tf23_loss_scale):
      return super().get_config()  # type: ignore[misc]
    return {"optimizer": self._serialized_inner(),
            "loss_scale": loss_scale_module.serialize(self._tf23_loss_scale)}

  @classmethod
  def from_config(cls, config: dict[str, Any],
                  custom_objects: Optional[dict[str, Any]] = None) -> Any:
    """Creates the optimizer from a TF 2.3 or TF 2.4 config.

    Args:
      config: TF 2.3's `{"optimizer", "loss_scale"}` or a TF 2.4
        `get_config` dict.
      custom_objects: Optional dict of user classes (a user `LossScale`
        too), by name.

    Raises:
      ValueError: If the loss scale names an unknown class, or the inner
        optimizer config cannot be honoured.
    """
    loss_scale: Any
    if "loss_scale" in config:
      loss_scale = deserialize_loss_scale(
          config["loss_scale"], custom_objects, cls._registered_object)
      inner = config["optimizer"]
    elif config["dynamic"]:
      loss_scale = loss_scale_module.DynamicLossScale(
          config["initial_scale"], config["dynamic_growth_steps"])
      inner = config["inner_optimizer"]
    else:
      loss_scale = float(config["initial_scale"])
      inner = config["inner_optimizer"]
    return cls._from_parts(inner, loss_scale, custom_objects)
