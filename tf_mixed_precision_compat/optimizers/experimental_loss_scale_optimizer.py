"""TF 2.3's experimental Keras `LossScaleOptimizer`, on Keras 3.

`LossScaleOptimizerV1(optimizer, loss_scale)` subclasses TF 2.4's class and
behaves as TF 2.3.4's where TF 2.4 broke TF 2.3 code (docs/api_differences.md).

Example:

>>> opt = LossScaleOptimizerV1(tf.keras.optimizers.SGD(), "dynamic")
>>> isinstance(opt, loss_scale_optimizer.LossScaleOptimizer), opt.dynamic
(True, True)
>>> float(opt.loss_scale()), float(opt.loss_scale)
(32768.0, 32768.0)
"""

from typing import Any, Optional

import keras
import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat import loss_scale as loss_scale_module
from tf_mixed_precision_compat.endpoints import export
from tf_mixed_precision_compat.optimizers import _inner
from tf_mixed_precision_compat.optimizers import _loss_scale_value
from tf_mixed_precision_compat.optimizers import _experimental_args
from tf_mixed_precision_compat.optimizers import loss_scale_optimizer

__all__ = ["LossScaleOptimizerV1"]

LossScaleOptimizer = loss_scale_optimizer.LossScaleOptimizer


def _custom_objects(custom_objects, serialized):
  """`custom_objects` plus the loss scale class Keras knows by that name.

  A user `LossScale` may come from `custom_objects`, a
  `keras.saving.custom_object_scope` or a registration, as Keras looked it up
  in TF 2.3.
  """
  merged = dict(custom_objects or {})
  name = serialized.get("class_name") if isinstance(serialized, dict) else None
  if isinstance(name, str) and name not in merged:
    found = keras.saving.get_registered_object(name, custom_objects)
    if found is not None:
      merged[name] = found
  return merged


@export("keras.mixed_precision.experimental.LossScaleOptimizer",
        v1=("keras.mixed_precision.experimental.LossScaleOptimizer",),
        warning=_experimental_args.V1_WARNING_PREFIX.rstrip())
@loss_scale_optimizer.serializable
class LossScaleOptimizerV1(LossScaleOptimizer):
  """The deprecated experimental LossScaleOptimizer of TF 2.3.

  Takes a `loss_scale` instead of `dynamic` / `initial_scale` /
  `dynamic_growth_steps`; docs/api_differences.md says where it follows TF
  2.3.4. Each construction logs how to write it with the non-experimental
  class.

  Example:

  >>> opt = LossScaleOptimizerV1(
  ...     tf.keras.optimizers.SGD(),
  ...     loss_scale_module.DynamicLossScale(multiplier=4))
  >>> float(opt.loss_scale()), opt.loss_scale.multiplier
  (32768.0, 4.0)
  """

  # TF 2.3 checkpointed every loss scale, fixed ones too.
  _TRACKS_ANY_LOSS_SCALE = True

  def __init__(self, optimizer: Any, loss_scale: Any) -> None:
    """Wraps `optimizer` with the loss scaling `loss_scale` describes.

    Args:
      optimizer: The Keras 3 optimizer to wrap.
      loss_scale: `"dynamic"`; an int or float (a fixed scale); any
        `LossScale` (ours, TF's `tf.compat.v1` ones or a user subclass),
        which the optimizer then uses and updates; or a serialized loss scale
        dict.

    Raises:
      ValueError: For any other `loss_scale`, or as `LossScaleOptimizer`.
      TypeError: As `LossScaleOptimizer`.
    """
    resolved, message = _experimental_args.tf23_loss_scale(loss_scale)
    # The base class checks the optimizer and the strategy; the scale it
    # would hold is replaced by the TF 2.3 `LossScale`.
    super().__init__(optimizer, dynamic=False, initial_scale=1.)
    self._loss_scale = resolved
    self._loss_scale_value = _loss_scale_value.LossScaleValue(resolved)
    tf.get_logger().warning(message)

  # ---------------------------------------------------------------- state --

  @property
  def loss_scale(self) -> Any:
    """The `LossScale`; `loss_scale()` and the value itself are the scale.

    TF 2.3 code calls it (`opt.loss_scale()`, a float32 scalar tensor) or
    uses the `LossScale`'s methods; TF 2.4 code uses it as a float32 scalar
    tensor (`float(opt.loss_scale)`, `opt.loss_scale * 2`,
    `tf.convert_to_tensor(opt.loss_scale)`).
    """
    return self._loss_scale_value

  @property
  def dynamic(self) -> bool:
    """Whether the loss scale may change (any but a `FixedLossScale`)."""
    return _experimental_args.fixed_scale(self._loss_scale) is None

  @property
  def initial_scale(self) -> Any:
    """The fixed or initial loss scale, or None for a user `LossScale`."""
    return _experimental_args.initial_scale(self._loss_scale)

  @property
  def dynamic_growth_steps(self) -> Optional[int]:
    """A `DynamicLossScale`'s `increment_period`, else None."""
    return getattr(self._loss_scale, "increment_period", None)

  @property
  def dynamic_counter(self) -> Optional[tf.Variable]:
    """A `DynamicLossScale`'s good-steps counter, else None."""
    return _experimental_args.good_steps_counter(self._loss_scale)

  # ------------------------------------------ checkpoints and configs --

  def _wrapper_children(self):
    # TF 2.3 tracked its LossScale, fixed or not, as `loss_scale`.
    return {"loss_scale": self._loss_scale}

  def _loss_scale_variables(self):
    children = _private_api.trackable_children(self._loss_scale, "checkpoint")
    return [v for _, v in sorted(children.items())
            if isinstance(v, tf.Variable)]

  def save_own_variables(self, store: Any) -> None:
    """Saves the loss scale's variables (by name) for `.keras` files."""
    for i, variable in enumerate(self._loss_scale_variables()):
      store[str(i)] = variable.numpy()

  def load_own_variables(self, store: Any) -> None:
    """Restores what `save_own_variables` saved."""
    variables = self._loss_scale_variables()
    if len(store.keys()) != len(variables):
      raise ValueError(
          f"Cannot load the loss scale of '{self.name}': expected "
          f"{len(variables)} saved values ({self._loss_scale!r}), got "
          f"{len(store.keys())}.")
    for i, variable in enumerate(variables):
      variable.assign(store[str(i)])

  def get_config(self) -> dict[str, Any]:
    """TF 2.4's config where it can express the loss scale, else TF 2.3's.

    Returns:
      `{"inner_optimizer", "dynamic", "initial_scale",
      "dynamic_growth_steps"}` (as TF 2.4.4's experimental class) for a
      fixed scale or a `DynamicLossScale` of multiplier 2; otherwise TF
      2.3.4's `{"optimizer", "loss_scale"}`.
    """
    if _experimental_args.tf24_representable(self._loss_scale):
      return super().get_config()
    return {
        "optimizer": self._adapter.serialize(),
        "loss_scale": loss_scale_module.serialize(self._loss_scale),
    }

  @classmethod
  def from_config(cls, config: dict[str, Any],
                  custom_objects: Optional[dict[str, Any]] = None) -> Any:
    """Creates the optimizer from a TF 2.3 or TF 2.4 config.

    Args:
      config: TF 2.3's `{"optimizer", "loss_scale"}` or a TF 2.4
        `get_config` dict.
      custom_objects: Optional dict of user classes (a user `LossScale`
        too), by name.

    Returns:
      A `LossScaleOptimizerV1`.

    Raises:
      ValueError: If the loss scale names an unknown class, or the inner
        optimizer config cannot be honoured by Keras 3.
    """
    config = dict(config)
    loss_scale: Any
    if "loss_scale" in config:
      loss_scale = loss_scale_module.deserialize(
          config["loss_scale"],
          _custom_objects(custom_objects, config["loss_scale"]))
      optimizer = config["optimizer"]
    elif config["dynamic"]:
      loss_scale = loss_scale_module.DynamicLossScale(
          config["initial_scale"], config["dynamic_growth_steps"])
      optimizer = config["inner_optimizer"]
    else:
      loss_scale = float(config["initial_scale"])
      optimizer = config["inner_optimizer"]
    return cls(_inner.deserialize(optimizer, custom_objects), loss_scale)


class _SerializedV1:
  """What Keras deserializes the class name "LossScaleOptimizerV1" as.

  TF 2.4.4's `tf.keras.optimizers.deserialize` made a `LossScaleOptimizer` of
  a serialized experimental one; it still does, unless only TF 2.3 could
  hold the loss scale (a TF 2.3 config with a `DynamicLossScale` whose
  multiplier is not 2 or a user `LossScale`): then it is a
  `LossScaleOptimizerV1` again, as TF 2.3.4 made it.
  """

  @classmethod
  def from_config(cls, config: dict[str, Any],
                  custom_objects: Optional[dict[str, Any]] = None) -> Any:
    if "loss_scale" in config:
      loss_scale = loss_scale_module.deserialize(
          config["loss_scale"],
          _custom_objects(custom_objects, config["loss_scale"]))
      if not _experimental_args.tf24_representable(loss_scale):
        return LossScaleOptimizerV1.from_config(config, custom_objects)
    return LossScaleOptimizer.from_config(config, custom_objects)

  def get_config(self) -> dict[str, Any]:
    raise NotImplementedError  # Never instantiated.


def _deserialize_v1_as_v2():
  """Makes Keras deserialize a serialized V1 optimizer as TF 2.4.4 did.

  See `_SerializedV1`. TF 2.4.4's `tf.keras.optimizers.deserialize` mapped
  the class name "LossScaleOptimizerV1" to `LossScaleOptimizer` (the
  experimental class was to be removed); `LossScaleOptimizerV1.from_config`
  called directly still returns a V1. V1 instances keep serializing under
  their own name; the second registration keeps `LossScaleOptimizer`'s.
  """
  register = keras.saving.register_keras_serializable
  register(package=loss_scale_optimizer.SERIALIZATION_PACKAGE,
           name="LossScaleOptimizerV1")(_SerializedV1)
  register(package=loss_scale_optimizer.SERIALIZATION_PACKAGE)(
      LossScaleOptimizer)


_deserialize_v1_as_v2()
