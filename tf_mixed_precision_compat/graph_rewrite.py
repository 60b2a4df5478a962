"""TF 2.3's `enable/disable_mixed_precision_graph_rewrite` (v2 and v1).

Enabling wraps the optimizer in the loss-scale optimizer of its kind (the
active Keras target's, or the `tf.compat.v1` one) and turns on Grappler's
`auto_mixed_precision` rewrite; it refuses a mixed global Keras policy, as
TF 2.3 did. The v2 flavours also log TF 2.4's deprecation warning.
"""

from typing import Any

import tensorflow as tf

from tf_mixed_precision_compat import _deprecation
from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat import keras_target
from tf_mixed_precision_compat.optimizers import compat_v1_optimizer
from tf_mixed_precision_compat.optimizers import (
    experimental_loss_scale_optimizer)
from tf_mixed_precision_compat.endpoints import export

__all__ = [
    "disable_mixed_precision_graph_rewrite",
    "disable_mixed_precision_graph_rewrite_v1",
    "enable_mixed_precision_graph_rewrite",
    "enable_mixed_precision_graph_rewrite_v1",
]

_OPTION = "auto_mixed_precision"

_POLICY_CONFLICT = (
    "The mixed precision graph rewrite cannot be enabled, because the global "
    "Keras dtype Policy has been set to a mixed precision policy. At most, one "
    "of the following can be called:\n\n"
    "  1. tf.keras.mixed_precision.experimental.set_policy() with a mixed "
    "precision policy (You called this first)\n\n"
    "  2. tf.train.experimental.enable_mixed_precision_graph_rewrite() (You "
    "called this second)\n"
    "You called both functions, which is an error, because both functions "
    "enable you to use mixed precision. If in doubt which function to use, "
    "use the first, as it supports Eager execution and is more customizable.")

# TF 2.4's warning, word for word (its tests match it).
_EXISTING_SESSIONS = (
    "You already have existing Sessions that do not use mixed precision. "
    "enable_mixed_precision_graph_rewrite() will not affect these Sessions.")

_ALREADY_DISABLED = ("disable_mixed_precision_graph_rewrite() called when "
                     "mixed precision is already disabled.")


def _v2_deprecation_text(function_name):
  """TF 2.4's dated deprecation warning of the v2 functions."""
  return (
      f"{function_name} (from {__name__}) is deprecated and will be removed "
      "after 2020-11-30.\nInstructions for updating:\nUse "
      "tf.keras.mixed_precision. There is a guide at "
      "https://www.tensorflow.org/guide/mixed_precision. Alternatively, "
      f"`tf.compat.v1.mixed_precision.{function_name}` can be used, but this "
      "is not recommended for TF2 code.")


def rewrite_is_enabled() -> bool:
  """Whether an `enable_...` call is in effect (no `disable_...` since)."""
  # TF's own flag, not the option: other code may set the option too.
  return _private_api.graph_rewrite_enabled()


def _mixed_keras_policy_name():
  """The name of a mixed global policy of a loaded Keras, else None."""
  for policy in keras_target.global_policies():
    name = str(getattr(policy, "name", ""))
    compute = getattr(policy, "compute_dtype", None)
    variable = getattr(policy, "variable_dtype", None)
    if name.startswith("mixed") or compute != variable:
      return name
  return None


def _keras_loss_scale_optimizer():
  """The active target's Keras `LossScaleOptimizerV1`."""
  if keras_target.active() == keras_target.TF_KERAS:
    # pylint: disable-next=g-import-not-at-top
    from tf_mixed_precision_compat import tf_keras_classes  # Imports tf_keras.
    return tf_keras_classes.LossScaleOptimizerV1
  return experimental_loss_scale_optimizer.LossScaleOptimizerV1


def _wrap_optimizer(opt, loss_scale, use_v1_behavior):
  """Wraps `opt` in the loss-scale optimizer made for its kind."""
  wrappers = [compat_v1_optimizer.MixedPrecisionLossScaleOptimizer]
  wrappers += keras_target.loss_scale_optimizer_classes()
  for wrapper in wrappers:
    if isinstance(opt, wrapper):
      raise ValueError(
          f'"opt" must not already be an instance of a {wrapper.__name__}. '
          "`enable_mixed_precision_graph_rewrite` will automatically wrap the "
          f"optimizer with a {wrapper.__name__}.")
  if isinstance(opt, tf.compat.v1.train.Optimizer):
    return compat_v1_optimizer.MixedPrecisionLossScaleOptimizer(opt, loss_scale)
  if compat_v1_optimizer.is_keras_optimizer(opt):
    return _keras_loss_scale_optimizer()(opt, loss_scale)
  either = "a tf.train.Optimizer or " if use_v1_behavior else ""
  raise ValueError(f'"opt" must be an instance of {either}a '
                   f"tf.keras.optimizers.Optimizer, but got: {opt}")


def _enable(opt, loss_scale, use_v1_behavior):
  """Checks, wraps, then switches the rewrite on: nothing changes on error."""
  if _mixed_keras_policy_name() is not None:
    raise ValueError(_POLICY_CONFLICT)
  if _private_api.non_mixed_precision_session_created():
    # Logged where TF 2.4 logged it, before the optimizer is checked.
    tf.get_logger().warning(_EXISTING_SESSIONS)
  wrapped = _wrap_optimizer(opt, loss_scale, use_v1_behavior)
  tf.config.optimizer.set_experimental_options({_OPTION: True})
  _private_api.set_graph_rewrite_enabled(True)
  return wrapped


def _disable():
  # Both flavours, as TF 2.4's v1 function called the v2 one.
  _deprecation.warn_once(
      disable_mixed_precision_graph_rewrite,
      _v2_deprecation_text("disable_mixed_precision_graph_rewrite"))
  if not rewrite_is_enabled():
    tf.get_logger().warning(_ALREADY_DISABLED)
  tf.config.optimizer.set_experimental_options({_OPTION: False})
  _private_api.set_graph_rewrite_enabled(False)


@export("train.experimental.enable_mixed_precision_graph_rewrite",
        warning=_v2_deprecation_text("enable_mixed_precision_graph_rewrite"))
def enable_mixed_precision_graph_rewrite(opt: Any,
                                         loss_scale: Any = "dynamic") -> Any:
  """Wraps `opt` for loss scaling and turns on the mixed precision rewrite.

  The rewrite makes suitable float32 ops of `tf.function` graphs float16 on
  GPUs of compute capability 7.0+. Take gradients through the returned
  optimizer: others are not loss scaled. Not together with a mixed policy.

  Example:

  >>> opt = enable_mixed_precision_graph_rewrite(
  ...     tf.compat.v1.train.GradientDescentOptimizer(0.1), loss_scale=8)
  >>> tf.config.optimizer.get_experimental_options()["auto_mixed_precision"]
  True
  >>> disable_mixed_precision_graph_rewrite()

  Args:
    opt: A Keras optimizer or a `tf.compat.v1.train.Optimizer`.
    loss_scale: A Python int or float (fixed loss scale), `"dynamic"` (the
      default, recommended) or a `LossScale` instance.

  Returns:
    `opt` wrapped in the matching loss-scale optimizer.

  Raises:
    ValueError: If the global Keras dtype policy is a mixed one, `opt` is a
      loss-scale optimizer or no optimizer, or `loss_scale` is refused.
    TypeError: If `opt` is a Keras optimizer but this package's Keras
      loss-scale optimizer is unavailable.
  """
  _deprecation.warn_once(
      enable_mixed_precision_graph_rewrite,
      _v2_deprecation_text("enable_mixed_precision_graph_rewrite"))
  return _enable(opt, loss_scale, use_v1_behavior=False)


@export(
    v1=("mixed_precision.enable_mixed_precision_graph_rewrite",
        "train.experimental.enable_mixed_precision_graph_rewrite"),
    deprecated=("train.experimental.enable_mixed_precision_graph_rewrite",))
def enable_mixed_precision_graph_rewrite_v1(opt: Any,
                                            loss_scale: Any = "dynamic"
                                           ) -> Any:
  """The `tf.compat.v1` `enable_mixed_precision_graph_rewrite`, for Sessions.

  The rewrite applies to Sessions created afterwards with the default config
  (a `ConfigProto` of one's own must set `auto_mixed_precision`); as in TF
  2.4, a warning names earlier Sessions without it (by either flavour).

  Example:

  >>> opt = enable_mixed_precision_graph_rewrite_v1(
  ...     tf.compat.v1.train.MomentumOptimizer(0.1, 0.9))
  >>> type(opt).__name__
  'MixedPrecisionLossScaleOptimizer'
  >>> disable_mixed_precision_graph_rewrite_v1()

  Args:
    opt: A `tf.compat.v1.train.Optimizer` or a Keras optimizer.
    loss_scale: As for `enable_mixed_precision_graph_rewrite`.

  Returns:
    `opt` wrapped in the matching loss-scale optimizer.

  Raises:
    ValueError, TypeError: As `enable_mixed_precision_graph_rewrite`.
  """
  return _enable(opt, loss_scale, use_v1_behavior=True)


@export("train.experimental.disable_mixed_precision_graph_rewrite",
        warning=_v2_deprecation_text("disable_mixed_precision_graph_rewrite"))
def disable_mixed_precision_graph_rewrite() -> None:
  """Turns the mixed precision graph rewrite off again (warns if it was off).

  Later `tf.function`s stay float32; wrapped optimizers keep scaling the loss.

  Example:

  >>> _ = enable_mixed_precision_graph_rewrite(
  ...     tf.compat.v1.train.GradientDescentOptimizer(0.1))
  >>> disable_mixed_precision_graph_rewrite()
  >>> tf.config.optimizer.get_experimental_options()["auto_mixed_precision"]
  False
  """
  _disable()


@export(
    v1=("mixed_precision.disable_mixed_precision_graph_rewrite",
        "train.experimental.disable_mixed_precision_graph_rewrite"),
    deprecated=("train.experimental.disable_mixed_precision_graph_rewrite",))
def disable_mixed_precision_graph_rewrite_v1() -> None:
  """Turns the mixed precision graph rewrite off for new Sessions.

  Sessions created while it was on keep it. Logs a warning if it was off,
  and, once, the v2 function's deprecation warning, as TF 2.4 did.

  Example:

  >>> _ = enable_mixed_precision_graph_rewrite_v1(
  ...     tf.compat.v1.train.GradientDescentOptimizer(0.1))
  >>> disable_mixed_precision_graph_rewrite_v1()
  >>> tf.config.optimizer.get_experimental_options()["auto_mixed_precision"]
  False
  """
  _disable()
