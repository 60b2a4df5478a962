"""TF 2.3's experimental Keras `LossScaleOptimizer`, on Keras 3.

`LossScaleOptimizerV1(optimizer, loss_scale)` subclasses TF 2.4's class and
behaves as TF 2.3.4's where TF 2.4 broke TF 2.3 code (docs/api_differences.md).

Example:

>>> opt = LossScaleOptimizerV1(keras.optimizers.SGD(), "dynamic")
>>> isinstance(opt, loss_scale_optimizer.LossScaleOptimizer), opt.dynamic
(True, True)
>>> float(opt.loss_scale()), float(opt.loss_scale)
(32768.0, 32768.0)
"""

from typing import Any, Optional

import keras

from tf_mixed_precision_compat.endpoints import export
from tf_mixed_precision_compat.loss_scale import _tracking
from tf_mixed_precision_compat.optimizers import _inner
from tf_mixed_precision_compat.optimizers import _experimental_args
from tf_mixed_precision_compat.optimizers import loss_scale_optimizer

__all__ = ["LossScaleOptimizerV1"]

LossScaleOptimizer = loss_scale_optimizer.LossScaleOptimizer


@export("keras.mixed_precision.experimental.LossScaleOptimizer",
        v1=("keras.mixed_precision.experimental.LossScaleOptimizer",),
        warning=_experimental_args.V1_WARNING_PREFIX.rstrip())
@loss_scale_optimizer.serializable
class LossScaleOptimizerV1(_experimental_args.TF23LossScaleMixin,
                           LossScaleOptimizer):
  """The deprecated experimental LossScaleOptimizer of TF 2.3.

  Takes a `loss_scale` instead of `dynamic` / `initial_scale` /
  `dynamic_growth_steps`; docs/api_differences.md says where it follows TF
  2.3.4. Each construction logs how to write it with the non-experimental
  class.

  Example:

  >>> from tf_mixed_precision_compat.loss_scale import DynamicLossScale
  >>> opt = LossScaleOptimizerV1(keras.optimizers.SGD(),
  ...                            DynamicLossScale(multiplier=4))
  >>> float(opt.loss_scale()), opt.loss_scale.multiplier
  (32768.0, 4.0)
  """

  # TF 2.3 checkpointed every loss scale, fixed ones too.
  _TRACKS_ANY_LOSS_SCALE = True

  _registered_object = staticmethod(keras.saving.get_registered_object)

  def _hold(self, loss_scale):
    self._loss_scale = loss_scale  # The base class's step updates it.

  def _wrapper_children(self):
    # TF 2.3 tracked its LossScale, fixed or not, as `loss_scale`.
    return {"loss_scale": self._loss_scale}

  def save_own_variables(self, store: Any) -> None:
    """Saves the loss scale's variables (by name) for `.keras` files."""
    for i, variable in enumerate(_tracking.variables_of(self._loss_scale)):
      store[str(i)] = variable.numpy()

  def load_own_variables(self, store: Any) -> None:
    """Restores what `save_own_variables` saved."""
    variables = _tracking.variables_of(self._loss_scale)
    if len(store.keys()) != len(variables):
      raise ValueError(
          f"Cannot load the loss scale of '{self.name}': expected "
          f"{len(variables)} saved values ({self._loss_scale!r}), got "
          f"{len(store.keys())}.")
    for i, variable in enumerate(variables):
      variable.assign(store[str(i)])

  def _serialized_inner(self):
    return self._adapter.serialize()

  @classmethod
  def _from_parts(cls, inner, loss_scale, custom_objects):
    return cls(_inner.deserialize(inner, custom_objects), loss_scale)


class _SerializedV1:
  """What Keras deserializes the class name "LossScaleOptimizerV1" as.

  A `LossScaleOptimizer`, as TF 2.4.4 made it, unless only TF 2.3 could hold
  the loss scale: then a `LossScaleOptimizerV1`, as TF 2.3.4 made it.
  """

  @classmethod
  def from_config(cls, config: dict[str, Any],
                  custom_objects: Optional[dict[str, Any]] = None) -> Any:
    if _experimental_args.tf23_only(config, custom_objects,
                                    keras.saving.get_registered_object):
      return LossScaleOptimizerV1.from_config(config, custom_objects)
    return LossScaleOptimizer.from_config(config, custom_objects)

  def get_config(self) -> dict[str, Any]:
    raise NotImplementedError  # Never instantiated.


# Keras deserializes a serialized V1 optimizer as TF 2.4.4 did; the second
# registration keeps `LossScaleOptimizer`'s name for its own serialization.
keras.saving.register_keras_serializable(
    package=loss_scale_optimizer.SERIALIZATION_PACKAGE,
    name="LossScaleOptimizerV1")(_SerializedV1)
keras.saving.register_keras_serializable(
    package=loss_scale_optimizer.SERIALIZATION_PACKAGE)(LossScaleOptimizer)
