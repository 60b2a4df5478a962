"""The tf_keras target's Keras classes: what tf_keras dropped, on its own.

TF 2.3's experimental `LossScaleOptimizerV1` and `PolicyV1`, `set_policy`
and `get_layer_policy`, built on tf_keras's classes; `REPLACEMENTS` maps
each Keras endpoint to them (`hooks.tf_keras` grafts them). Imports
tf_keras: only the tf_keras target (`TF_USE_LEGACY_KERAS=1`) loads it.
"""

from typing import Any, Optional

import tensorflow as tf
import tf_keras

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat import loss_scale as loss_scale_module
from tf_mixed_precision_compat import policy as policy_module
from tf_mixed_precision_compat.optimizers import _experimental_args
from tf_mixed_precision_compat.optimizers import (
    experimental_loss_scale_optimizer)
from tf_mixed_precision_compat.optimizers import loss_scale_optimizer

_LSO_V2, _LSO_V3, _LSO_META = (
    _private_api.tf_keras_loss_scale_optimizer_classes())

_BaseLossScaleOptimizer = tf_keras.mixed_precision.LossScaleOptimizer
Policy = tf_keras.mixed_precision.Policy
global_policy = tf_keras.mixed_precision.global_policy
set_global_policy = tf_keras.mixed_precision.set_global_policy


# Config keys of tf_keras's current optimizers that OptimizerV2 lacks.
_CURRENT_FAMILY_ONLY = ("weight_decay", "use_ema", "ema_momentum",
                        "ema_overwrite_frequency", "jit_compile",
                        "is_legacy_optimizer")


def _for_session(optimizer):
  """`optimizer`, or in a TF1 graph its `optimizers.legacy` counterpart.

  tf_keras's current optimizers do nothing in a session (`minimize` returns
  None); TF 2.4 jobs got the OptimizerV2 there, so the wrapper gets that one.
  """
  if (tf.executing_eagerly() or tf.inside_function() or
      not isinstance(optimizer, tf_keras.optimizers.Optimizer)):
    return optimizer
  config = _private_api.tf_keras_optimizer_config_in_graph(optimizer)
  for key in _CURRENT_FAMILY_ONLY:
    config.pop(key, None)
  converted = getattr(tf_keras.optimizers.legacy,
                      type(optimizer).__name__).from_config(config)
  tf.get_logger().warning(
      f"LossScaleOptimizer built in a TF1 graph: tf_keras's "
      f"{type(optimizer).__name__} cannot run in a session, so it wraps "
      f"{type(converted).__module__.split('.')[-1]}'s OptimizerV2 "
      f"{type(converted).__name__} with the same configuration instead, as "
      "TF 2.4's tf.keras.optimizers did. Use `opt.inner_optimizer` to reach "
      "it.")
  return converted


def _wrap_once(optimizer, tracks_loss_scale, build):
  """`build()`, refused with TF 2.4's error if `optimizer` was ever wrapped.

  Made before tf_keras's own refusal, also after tf_keras's wrappers, on the
  optimizer the job passed (which `_for_session` may replace).
  """
  loss_scale_optimizer.check_unwrapped(
      optimizer, tracks_loss_scale,
      wrapped_elsewhere=_private_api.tf_keras_wrapped_by_loss_scale_optimizer(
          optimizer))
  try:
    wrapper = build()
  except Exception:
    # tf_keras marks the optimizer wrapped before it checks the scale
    # arguments; TF 2.4 let a corrected call wrap it after a refused one.
    _private_api.tf_keras_unmark_wrapped(optimizer)
    raise
  loss_scale_optimizer.record_wrapped(optimizer, tracks_loss_scale)
  return wrapper


class _LossScaleOptimizerMeta(_LSO_META):
  """tf_keras's class choice, after `_for_session`."""

  def __call__(cls, inner_optimizer, *args, **kwargs):
    if cls is not LossScaleOptimizer:
      return super().__call__(inner_optimizer, *args, **kwargs)
    dynamic = kwargs.get("dynamic", args[0] if args else True)
    if not isinstance(dynamic, bool):  # tf_keras raises TF 2.4's TypeError.
      return _BaseLossScaleOptimizer(inner_optimizer, *args, **kwargs)
    return _wrap_once(
        inner_optimizer, dynamic, lambda: _BaseLossScaleOptimizer(
            _for_session(inner_optimizer), *args, **kwargs))

  def __instancecheck__(cls, instance):
    if cls is LossScaleOptimizer:  # Also those tf_keras builds itself.
      return isinstance(instance, _BaseLossScaleOptimizer)
    return super().__instancecheck__(instance)

  def __subclasscheck__(cls, subclass):
    if cls is LossScaleOptimizer:
      return issubclass(subclass, _BaseLossScaleOptimizer)
    return super().__subclasscheck__(subclass)


class LossScaleOptimizer(_BaseLossScaleOptimizer,
                         metaclass=_LossScaleOptimizerMeta):
  """TF 2.4's `LossScaleOptimizer`: tf_keras's own, usable in sessions.

  It builds tf_keras's class for the wrapped optimizer's family (after
  `_for_session`); every tf_keras loss-scale optimizer is an instance.
  """


class _V1Meta(_LossScaleOptimizerMeta):
  """Builds the V1 class of the wrapped optimizer's family."""

  def __call__(cls, optimizer, loss_scale):
    if cls is not LossScaleOptimizerV1:
      return type.__call__(cls, optimizer, loss_scale)
    inner = _for_session(optimizer)
    for family, v1_class in ((tf_keras.optimizers.legacy.Optimizer,
                              _V1OnOptimizerV2),
                             (tf_keras.optimizers.Optimizer, _V1OnOptimizer)):
      if isinstance(inner, family):
        return _wrap_once(optimizer, True, lambda v1_class=v1_class:
                          type.__call__(v1_class, inner, loss_scale))
    raise TypeError('"inner_optimizer" must be an instance of '
                    "`tf.keras.optimizers.Optimizer` or "
                    "`tf.keras.optimizers.experimental.Optimizer`, but got: "
                    f"{optimizer}.")


class _TF23LossScaleState(
    _private_api.tf_keras_dynamic_loss_scale_state_class()):
  """tf_keras's dynamic state class, updating a TF 2.3 `LossScale` instead.

  tf_keras updates only its own state class; TF 2.3 updated any `LossScale`.
  """

  def __init__(self, loss_scale):  # pylint: disable=super-init-not-called
    tf.__internal__.tracking.Trackable.__init__(self)
    self._tf23_loss_scale = loss_scale

  def update(self, grads):
    update_op, should_apply = self._tf23_loss_scale.update(grads)
    return (tf.no_op() if update_op is None else update_op), should_apply

  def _trackable_children(self, save_type="checkpoint", **kwargs):
    return {}  # The LossScale itself is the "loss_scale" dependency.


class LossScaleOptimizerV1(_experimental_args.TF23LossScaleMixin,
                           _BaseLossScaleOptimizer, metaclass=_V1Meta):
  """TF 2.3's experimental `LossScaleOptimizer(optimizer, loss_scale)`.

  A tf_keras `LossScaleOptimizer` of the wrapped optimizer's family that
  behaves as TF 2.3.4's where TF 2.4 broke TF 2.3 code, as the Keras 3
  target's does (`experimental_loss_scale_optimizer`): it holds and updates
  any `LossScale`, checkpointed under `optimizer/loss_scale/`, and logs TF
  2.4's deprecation message.

  Example:

  >>> opt = LossScaleOptimizerV1(tf_keras.optimizers.SGD(), loss_scale=128)
  >>> float(opt.loss_scale), float(opt.loss_scale())
  (128.0, 128.0)
  """

  _registered_object = staticmethod(tf_keras.utils.get_registered_object)

  def _hold(self, loss_scale):
    # tf_keras's step updates only its own state class; TF 2.3 checkpointed
    # the `LossScale` itself.
    self._loss_scale = _TF23LossScaleState(loss_scale)
    self._track_trackable(loss_scale, "loss_scale")

  def _serialized_inner(self):
    return tf_keras.optimizers.serialize(self._optimizer)

  @classmethod
  def _from_parts(cls, inner, loss_scale, custom_objects):
    inner = tf_keras.optimizers.deserialize(
        inner, custom_objects=custom_objects, use_legacy_optimizer=True)
    # The metaclass picks the class of the inner optimizer's family.
    return LossScaleOptimizerV1(inner, loss_scale)


class SerializedV1:
  """What tf_keras deserializes "LossScaleOptimizerV1" as (TF 2.4.4's rule).

  A `LossScaleOptimizer`, unless only TF 2.3 could hold the loss scale.
  """

  @classmethod
  def from_config(cls, config: dict[str, Any],
                  custom_objects: Optional[dict[str, Any]] = None) -> Any:
    if _experimental_args.tf23_only(config, custom_objects,
                                    tf_keras.utils.get_registered_object):
      return LossScaleOptimizerV1.from_config(config, custom_objects)
    # What tf_keras's own deserialize makes of "LossScaleOptimizerV1".
    return tf_keras.optimizers.deserialize(
        {"class_name": "LossScaleOptimizer", "config": dict(config)},
        custom_objects=custom_objects)

  def get_config(self) -> dict[str, Any]:
    raise NotImplementedError  # Never instantiated.


class _V1OnOptimizerV2(LossScaleOptimizerV1, _LSO_V2):
  """`LossScaleOptimizerV1` around an `optimizers.legacy.*` (TF 2.4's)."""


class _V1OnOptimizer(LossScaleOptimizerV1, _LSO_V3):
  """`LossScaleOptimizerV1` around one of tf_keras's current optimizers."""


for _cls in (_V1OnOptimizerV2, _V1OnOptimizer):
  # What configs and reprs show, as TF 2.4 named it.
  _cls.__name__ = _cls.__qualname__ = "LossScaleOptimizerV1"


class PolicyV1(Policy):
  """TF 2.3's experimental `Policy(name, loss_scale="auto")` on tf_keras.

  A tf_keras `Policy` (so any tf_keras layer takes it as `dtype`) that also
  holds the loss scale `Model.compile` wraps the optimizer with.

  Example:

  >>> PolicyV1("mixed_float16", loss_scale=1024).loss_scale
  FixedLossScale(1024.0)
  """

  def __init__(self, name: str, loss_scale: Any = "auto") -> None:
    """As `policy.PolicyV1`, on tf_keras's `Policy` names."""
    super().__init__(name)
    self._using_default_loss_scale, self._loss_scale = (
        policy_module.v1_loss_scale(name, self.compute_dtype, loss_scale))

  @property
  def loss_scale(self) -> Optional[loss_scale_module.LossScale]:
    """The `LossScale` `Model.compile` uses, or None."""
    return self._loss_scale

  @property
  def should_cast_variables(self) -> bool:
    """As `policy.PolicyV1.should_cast_variables` (TF 2.3's)."""
    return self.variable_dtype != self.compute_dtype

  def __repr__(self):
    return policy_module.v1_repr(self)

  def get_config(self) -> dict[str, Any]:
    """Returns the name, and the serialized loss scale unless "auto"."""
    return policy_module.v1_config(self.name, self._using_default_loss_scale,
                                   self.loss_scale)

  @classmethod
  def from_config(cls, config: dict[str, Any],
                  custom_objects: Optional[dict[str, Any]] = None) -> Any:
    """Creates the policy from `get_config()` output."""
    return cls(**policy_module.v1_config_arguments(config, custom_objects))


def set_policy(policy: Any) -> None:
  """TF 2.3's `experimental.set_policy`: sets tf_keras's global policy."""
  set_global_policy(policy)


def get_layer_policy(layer: Any) -> Any:
  """Returns a tf_keras layer's `Policy`; ValueError for a non-layer."""
  if not isinstance(layer, tf_keras.layers.Layer):
    raise ValueError(
        f"get_policy can only be called on a layer, but got: {layer}")
  return layer.dtype_policy


# What `install()` grafts at each Keras endpoint on this target, keyed by the
# Keras 3 target's object registered there (`adapter.symbol_for`).
REPLACEMENTS = {
    loss_scale_optimizer.LossScaleOptimizer: LossScaleOptimizer,
    experimental_loss_scale_optimizer.LossScaleOptimizerV1: (
        LossScaleOptimizerV1),
    policy_module.Policy: Policy,
    policy_module.PolicyV1: PolicyV1,
    policy_module.global_policy: global_policy,
    policy_module.set_policy: set_policy,
    policy_module.get_layer_policy: get_layer_policy,
}
