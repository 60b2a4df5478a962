"""TF 2.3's loss scales: `LossScale`, `FixedLossScale`, `DynamicLossScale`.

Calling a `LossScale` returns the float32 factor the loss is multiplied by;
`update(grads)` adjusts it and says whether the step should be applied. They
checkpoint as TF 2.3.4's did, and TF 2.21's own `tf.compat.v1` loss scales
count as `LossScale`s (docs/architecture.md).
"""

from __future__ import annotations

import abc
import math
from typing import Any, Optional

import tensorflow as tf

from tf_mixed_precision_compat import _deprecation
from tf_mixed_precision_compat.endpoints import export
from tf_mixed_precision_compat.loss_scale import _tracking
from tf_mixed_precision_compat.loss_scale import dynamic_state

__all__ = [
    "DynamicLossScale", "FixedLossScale", "LossScale", "deserialize", "get",
    "serialize"
]


def _deprecation_text(cls_name):
  # Names the public module users import these classes from (the package),
  # as earlier releases did; users filter on the text.
  return _deprecation.deprecation_message(
      f"{cls_name}.__init__", __name__.rpartition(".")[0],
      "Use tf.keras.mixed_precision.LossScaleOptimizer instead. "
      f"LossScaleOptimizer now has all the functionality of {cls_name}")


def _export_loss_scale(name, warn=True):
  """Exports loss-scale class `name` at TF 2.3's (deprecated) endpoints."""
  experimental = (f"mixed_precision.experimental.{name}",
                  f"train.experimental.{name}")
  return export(*experimental, v1=(f"mixed_precision.{name}",) + experimental,
                deprecated=experimental,
                warning=_deprecation_text(name) if warn else None)


@_export_loss_scale("LossScale", warn=False)
class LossScale(_tracking.PerGraphWeights, metaclass=abc.ABCMeta):
  """Base class of the TF 2.3 loss scales.

  Subclasses return the loss scale when called and adjust it in `update`;
  their variables are kept per graph and checkpointed under their names.
  Where a `LossScale` is taken, an int or float or `"dynamic"` is too (`get`).

  Example:

  >>> loss_scale = FixedLossScale(128)
  >>> float(loss_scale())
  128.0
  """

  @abc.abstractmethod
  def __call__(self) -> tf.Tensor:
    """Returns the current loss scale as a scalar float32 tensor."""

  @abc.abstractmethod
  def update(self, grads: Any) -> tuple[Any, Any]:
    """Adjusts the loss scale from the gradients of one step.

    Under a `tf.distribute.Strategy`, call it in cross-replica context.

    Args:
      grads: A nested structure of unscaled gradients (tensors,
        `tf.IndexedSlices` or None, which are ignored).

    Returns:
      `(update_op, should_apply_gradients)`: `update_op` is None eagerly,
      else what updates the loss scale when run; `should_apply_gradients` is
      a bool or scalar bool tensor, False when the step must be skipped.
    """

  @abc.abstractmethod
  def get_config(self) -> dict[str, Any]:
    """Returns the constructor arguments as a dict."""

  @classmethod
  def from_config(cls, config: dict[str, Any]) -> LossScale:
    """Creates a loss scale from a `get_config` dict."""
    return cls(**config)


# TF 2.21 still ships TF 2.3's classes under tf.compat.v1; they behave the same
# and are accepted wherever ours are.
LossScale.register(tf.compat.v1.mixed_precision.LossScale)


@_export_loss_scale("FixedLossScale")
class FixedLossScale(LossScale):
  """A loss scale that never changes.

  Example:

  >>> loss_scale = FixedLossScale(1024)
  >>> float(loss_scale())
  1024.0
  >>> loss_scale.update([tf.constant(float("inf"))])[1]
  True
  """

  def __init__(self, loss_scale_value: float) -> None:
    """Creates the fixed loss scale.

    Args:
      loss_scale_value: A Python int or float, at least 1 and finite (also
        as a float32); else a ValueError is raised.
    """
    _deprecation.warn_once(FixedLossScale, _deprecation_text("FixedLossScale"))
    super().__init__()
    if not dynamic_state.is_real(loss_scale_value):
      raise ValueError("loss_scale_value must be a Python int or float.")
    if loss_scale_value < 1:
      raise ValueError("loss_scale_value must be at least 1.")
    if not math.isfinite(loss_scale_value):
      raise ValueError(
          f"loss_scale_value must be finite, got {loss_scale_value}.")
    # Applied as a float32, where e.g. 1e39 is inf.
    dynamic_state.check_float32_finite(float(loss_scale_value),
                                       "loss_scale_value")
    # Kept as a Python float: a tensor made here could live on another device
    # or in another graph than the one the loss scale is used in.
    self._loss_scale_value = float(loss_scale_value)

  def __call__(self) -> tf.Tensor:
    return tf.convert_to_tensor(self._loss_scale_value)

  def update(self, grads: Any) -> tuple[Any, Any]:
    del grads
    return tf.no_op(), True

  def __repr__(self):
    return f"FixedLossScale({self._loss_scale_value})"

  def get_config(self) -> dict[str, Any]:
    return {"loss_scale_value": self._loss_scale_value}


@_export_loss_scale("DynamicLossScale")
class DynamicLossScale(dynamic_state.DynamicScaleCore, LossScale):
  """A loss scale that grows while gradients are finite, shrinks on overflow.

  The algorithm, per call to `update`:

      if all gradients are finite:
        good_steps += 1
        if good_steps >= increment_period:
          loss_scale *= multiplier   (unless that overflows to inf)
          good_steps = 0
      else:                          (the step is skipped)
        loss_scale = max(loss_scale / multiplier, 1)
        good_steps = 0

  Start high: a scale that is too high comes down in one step per halving,
  while one that is too low takes `increment_period` steps per doubling.

  Example:

  >>> loss_scale = DynamicLossScale(initial_loss_scale=8, increment_period=2)
  >>> _, apply = loss_scale.update([tf.constant(float("inf"))])
  >>> bool(apply), float(loss_scale())
  (False, 4.0)
  >>> for _ in range(2):
  ...   _ = loss_scale.update([tf.constant(1.)])
  >>> float(loss_scale())
  8.0
  """

  # TF 2.3's name for the core's growth steps, in error messages too.
  _growth_steps_arg = "increment_period"

  def __init__(self,
               initial_loss_scale: float = 2**15,
               increment_period: int = 2000,
               multiplier: float = 2.) -> None:
    """Creates the dynamic loss scale and its two variables.

    Args:
      initial_loss_scale: A Python int or float, finite and at least 1; the
        default 2**15 is about half float16's largest value.
      increment_period: A Python int >= 1: after this many consecutive finite
        steps the loss scale grows.
      multiplier: A Python int or float > 1: the growth and shrink factor.

    Raises:
      TypeError: If `initial_loss_scale` is a non-number `float()` rejects.
      ValueError: If an argument is out of range.
    """
    _deprecation.warn_once(DynamicLossScale,
                           _deprecation_text("DynamicLossScale"))
    # TF 2.3 accepted nonsense here (a NaN scale, a period of 0); the core
    # refuses it.
    super().__init__(initial_loss_scale, increment_period, multiplier)

  @property
  def increment_period(self) -> int:
    """Consecutive finite steps after which the scale grows, an int."""
    return self._growth_steps

  @property
  def _num_good_steps(self) -> tf.Variable:
    # TF 2.3's attribute for the counter, which TF 2.3-era code reads.
    return self._counter

  def __repr__(self):
    return self._state_repr("DynamicLossScale", "increment_period",
                            "num_good_steps")

  def get_config(self) -> dict[str, Any]:
    return {
        "initial_loss_scale": self.initial_loss_scale,
        "increment_period": self.increment_period,
        "multiplier": self.multiplier,
    }


# Ours and TF 2.21's own tf.compat.v1 classes, which behave the same.
FIXED_TYPES = (FixedLossScale, tf.compat.v1.mixed_precision.FixedLossScale)
DYNAMIC_TYPES = (DynamicLossScale,
                 tf.compat.v1.mixed_precision.DynamicLossScale)


def get(identifier: Any) -> Optional[LossScale]:
  """Returns a loss scale for `identifier`.

  Args:
    identifier: A `LossScale` (ours or TF's `tf.compat.v1` one), returned as
      is; a Python int or float, giving a `FixedLossScale`; `"dynamic"`, giving
      a default `DynamicLossScale`; a `serialize` dict; or None.

  Raises:
    ValueError: If `identifier` is none of the above.

  Example:

  >>> get(8)
  FixedLossScale(8.0)
  >>> get(None) is None
  True
  """
  if identifier is None or isinstance(identifier, LossScale):
    return identifier
  if isinstance(identifier, dict):
    return deserialize(identifier)
  if dynamic_state.is_real(identifier):
    return FixedLossScale(identifier)
  if isinstance(identifier, str) and identifier == "dynamic":
    return DynamicLossScale()
  raise ValueError(f"Could not interpret loss scale identifier: {identifier}")


def serialize(loss_scale: LossScale) -> dict[str, Any]:
  """Returns `loss_scale` in Keras' `{"class_name", "config"}` form.

  Raises:
    ValueError: If `loss_scale` is not a `LossScale`.

  Example:

  >>> serialize(FixedLossScale(4))
  {'class_name': 'FixedLossScale', 'config': {'loss_scale_value': 4.0}}
  """
  if not isinstance(loss_scale, LossScale):
    raise ValueError(
        f"loss_scale must be a LossScale instance, got {loss_scale!r}.")
  return {
      "class_name": type(loss_scale).__name__,
      "config": loss_scale.get_config()
  }


def deserialize(config: dict[str, Any],
                custom_objects: Optional[dict[str, Any]] = None) -> LossScale:
  """Creates a loss scale from a `serialize` dict.

  Only `FixedLossScale`, `DynamicLossScale` and classes named in
  `custom_objects` (a dict, name to class) are instantiated; no other class
  name is ever imported.

  Raises:
    ValueError: If `config` is malformed or names an unknown class.

  Example:

  >>> deserialize({"class_name": "FixedLossScale",
  ...              "config": {"loss_scale_value": 2}})
  FixedLossScale(2.0)
  """
  if (not isinstance(config, dict) or "class_name" not in config or
      not isinstance(config.get("config", {}), dict)):
    raise ValueError("config must be a dict with keys 'class_name' and "
                     f"'config', got {config!r}.")
  extra = set(config) - {"class_name", "config", "module", "registered_name"}
  if extra:
    raise ValueError(f"Unexpected keys {sorted(extra)} in loss scale config.")
  classes: dict[str, Any] = {
      cls.__name__: cls for cls in (FixedLossScale, DynamicLossScale)}
  classes.update(custom_objects or {})
  class_name = config["class_name"]
  if class_name not in classes:
    raise ValueError(f"Unknown loss scale: {class_name}")
  try:
    return classes[class_name].from_config(config.get("config", {}))
  except TypeError as e:
    raise ValueError(
        f"Invalid config for loss scale {class_name}: {config!r} ({e})") from e
