"""TF 2.3's experimental Keras `LossScaleOptimizer`, on Keras 3.

`LossScaleOptimizerV1(optimizer, loss_scale)` is TF 2.4's
`LossScaleOptimizer` configured from a TF 2.3 loss scale (`_v1_args`), as TF
2.4 made it: a subclass whose constructor and config take `loss_scale`.

Example:

>>> opt = LossScaleOptimizerV1(tf.keras.optimizers.SGD(), "dynamic")
>>> isinstance(opt, loss_scale_optimizer.LossScaleOptimizer), opt.dynamic
(True, True)
"""

from typing import Any, Optional

import keras
import tensorflow as tf

from tf_mixed_precision_compat.endpoints import export
from tf_mixed_precision_compat.optimizers import _inner
from tf_mixed_precision_compat.optimizers import _v1_args
from tf_mixed_precision_compat.optimizers import loss_scale_optimizer

__all__ = ["LossScaleOptimizerV1"]

LossScaleOptimizer = loss_scale_optimizer.LossScaleOptimizer


@export("keras.mixed_precision.experimental.LossScaleOptimizer",
        v1=("keras.mixed_precision.experimental.LossScaleOptimizer",),
        warning=_v1_args.V1_WARNING_PREFIX.rstrip())
@loss_scale_optimizer.serializable
class LossScaleOptimizerV1(LossScaleOptimizer):
  """The deprecated experimental LossScaleOptimizer of TF 2.3.

  Identical to `LossScaleOptimizer` except for the constructor, which takes a
  `loss_scale` instead of `dynamic` / `initial_scale` /
  `dynamic_growth_steps`. Each construction logs how to write it with the
  non-experimental class.

  Example:

  >>> opt1 = LossScaleOptimizerV1(tf.keras.optimizers.SGD(), loss_scale=123)
  >>> opt2 = LossScaleOptimizer(tf.keras.optimizers.SGD(), dynamic=False,
  ...                           initial_scale=123)
  >>> opt1.get_config()["initial_scale"] == opt2.get_config()["initial_scale"]
  True
  """

  def __init__(self, optimizer: Any, loss_scale: Any) -> None:
    """Wraps `optimizer` with the loss scaling `loss_scale` describes.

    Args:
      optimizer: The Keras 3 optimizer to wrap.
      loss_scale: `"dynamic"`; an int or float (a fixed scale); a
        `FixedLossScale` or `DynamicLossScale` (ours or TF's `tf.compat.v1`
        ones; the multiplier must be 2); or a serialized loss scale dict.

    Raises:
      TypeError: For a `LossScale` that is neither fixed nor dynamic.
      ValueError: For a `DynamicLossScale` whose multiplier is not 2, or any
        other value.
    """
    kwargs, message = _v1_args.v1_arguments(loss_scale)
    super().__init__(optimizer, **kwargs)
    tf.get_logger().warning(message)

  @classmethod
  def from_config(cls, config: dict[str, Any],
                  custom_objects: Optional[dict[str, Any]] = None) -> Any:
    """Creates the optimizer from a TF 2.3 or TF 2.4 config.

    Args:
      config: TF 2.3's `{"optimizer", "loss_scale"}` or a TF 2.4
        `get_config` dict.
      custom_objects: Optional dict of user classes, by name.

    Returns:
      A `LossScaleOptimizerV1`.

    Raises:
      ValueError: If the loss scale is dynamic with a multiplier other than
        2, or the inner optimizer config cannot be honoured by Keras 3.
    """
    config = dict(config)
    if "loss_scale" in config:
      args = _v1_args.tf23_config_arguments(config["loss_scale"])
      optimizer = config["optimizer"]
    else:
      args = {
          "dynamic": config["dynamic"],
          "initial_scale": config["initial_scale"],
          "dynamic_growth_steps": config["dynamic_growth_steps"],
      }
      optimizer = config["inner_optimizer"]
    loss_scale: Any
    if args["dynamic"]:
      loss_scale = {
          "class_name": "DynamicLossScale",
          "config": {
              "initial_loss_scale": args["initial_scale"],
              "increment_period": args["dynamic_growth_steps"],
              "multiplier": 2.0,
          }
      }
    else:
      loss_scale = float(args["initial_scale"])
    return cls(_inner.deserialize(optimizer, custom_objects), loss_scale)


def _deserialize_v1_as_v2():
  """Makes Keras deserialize a serialized V1 optimizer as `LossScaleOptimizer`.

  TF 2.4.4's `tf.keras.optimizers.deserialize` mapped the class name
  "LossScaleOptimizerV1" to `LossScaleOptimizer` (the experimental class was
  to be removed); `LossScaleOptimizerV1.from_config` called directly still
  returns a V1. V1 instances keep serializing under their own name: the
  second registration gives `LossScaleOptimizer` its own name back.
  """
  register = keras.saving.register_keras_serializable
  register(package=loss_scale_optimizer.SERIALIZATION_PACKAGE,
           name="LossScaleOptimizerV1")(LossScaleOptimizer)
  register(package=loss_scale_optimizer.SERIALIZATION_PACKAGE)(
      LossScaleOptimizer)


_deserialize_v1_as_v2()
