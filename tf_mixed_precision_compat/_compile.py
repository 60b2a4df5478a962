"""The `Model.compile` of TF 2.3/2.4, which wrapped the optimizer by policy.

Keras 3 only offers its own wrapper. This module patches nothing: `install`
puts the `compile` built here in place and takes it away again.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import keras

from tf_mixed_precision_compat import policy as policy_module
from tf_mixed_precision_compat.optimizers import loss_scale_optimizer
from tf_mixed_precision_compat.optimizers import (
    experimental_loss_scale_optimizer)

# The attribute of a `make_compile` result holding the `compile` it wraps.
_ORIGINAL = "_tf_mixed_precision_compat_original"


def compile_owner() -> type:
  """The class of `keras.Model`'s MRO that defines `compile` (Keras's Trainer).

  Not `keras.Model`: loading a `.keras` file skips `compile_from_config` for
  a class whose `compile` differs from the Trainer's (a user override).
  """
  return next(k for k in keras.Model.__mro__ if "compile" in vars(k))


def _loss_scale_for(model):
  """What TF 2.4's `Model._get_optimizer` decided from the model's policy."""
  policy = getattr(model, "dtype_policy", None)
  if isinstance(policy, policy_module.PolicyV1):
    return policy.loss_scale
  if getattr(policy, "name", None) == "mixed_float16":
    return "dynamic"
  return None


def _wrap_optimizer(optimizer, loss_scale):
  optimizer = keras.optimizers.get(optimizer)
  already_wrapped = (loss_scale_optimizer.LossScaleOptimizer,
                     keras.optimizers.LossScaleOptimizer)
  if isinstance(optimizer, already_wrapped):
    return optimizer
  if isinstance(loss_scale, str) and loss_scale == "dynamic":
    return loss_scale_optimizer.LossScaleOptimizer(optimizer)
  return experimental_loss_scale_optimizer.LossScaleOptimizerV1(
      optimizer, loss_scale)


def make_compile(original: Callable[..., Any]) -> Callable[..., Any]:
  """Keras 3's `original` compile, wrapping the optimizer as TF 2.3/2.4 did.

  See `install.enable_compile_integration`; `original_of` gives `original`.
  """

  @functools.wraps(original)
  def compile(self, optimizer="rmsprop", *args, **kwargs):  # pylint: disable=redefined-builtin,keyword-arg-before-vararg
    if kwargs.get("auto_scale_loss", True):
      loss_scale = _loss_scale_for(self)
      if loss_scale is not None:
        optimizer = _wrap_optimizer(optimizer, loss_scale)
      # The decision above is TF's and final: Keras 3 must neither add its own
      # wrapper around ours nor wrap where TF did not (a PolicyV1 named
      # mixed_float16 whose loss scale is None).
      kwargs["auto_scale_loss"] = False
    return original(self, optimizer, *args, **kwargs)

  setattr(compile, _ORIGINAL, original)
  return compile


def original_of(function: Any) -> Optional[Callable[..., Any]]:
  """The `compile` that `function` wraps if `make_compile` made it, or None."""
  return getattr(function, _ORIGINAL, None)
