"""The hooks the tf_keras target installs through `install()`'s journal.

The TF 2.3/2.4 config names, TF 2.3's `compile` wrapping by a `PolicyV1`'s
loss scale, TF 2.2's `base_optimizer` checkpoint edge, `get_gradients`, and
the optimizer restore and loaders of `restore` and `h5`.
"""

from typing import Any, Callable

import tensorflow as tf
import tf_keras

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat import tf_keras_classes as classes
from tf_mixed_precision_compat.hooks.tf_keras import h5
from tf_mixed_precision_compat.hooks.tf_keras import restore
from tf_mixed_precision_compat.hooks.tf_keras import tf24_members
from tf_mixed_precision_compat.optimizers import _optimizer_v2_methods
from tf_mixed_precision_compat.optimizers import _step

_LSO_V3 = _private_api.tf_keras_loss_scale_optimizer_classes()[1]


def install(journal: Any, replace: Callable[[Any, Any], None]) -> None:
  """Applies the tf_keras target's hooks (`KerasTarget.install`)."""
  custom_objects = tf_keras.utils.get_custom_objects()
  # TF 2.3/2.4 config class names (not the loss scales, as on Keras 3).
  for name, cls in (("PolicyV1", classes.PolicyV1),
                    ("LossScaleOptimizerV1", classes.SerializedV1)):
    journal.set_item(custom_objects, name, cls)
  restore_tf22_dependencies(journal.set_attr)
  restore_tf24_members(journal.set_attr)
  _patch_optimizer_restore(journal)
  _patch_loading(journal, replace)
  model = tf_keras.Model
  journal.set_attr(model, "_get_optimizer", wrap_get_optimizer(
      _private_api.tf_keras_model_get_optimizer(model)))


def _patch_optimizer_restore(journal):
  """TF 2.x optimizer checkpoints into tf_keras's optimizers (`restore`)."""
  current = tf_keras.optimizers.Optimizer
  journal.set_attr(current, "_lookup_dependency",
                   restore.wrap_lookup_dependency(
                       _private_api.tf_keras_optimizer_lookup_dependency(
                           current)))
  journal.set_attr(current, "_create_or_restore_slot_variable",
                   restore.create_or_restore_slot_variable)
  status = _private_api.checkpoint_load_status_class()
  for name in ("assert_consumed", "assert_existing_objects_matched"):
    journal.set_attr(status, name,
                     restore.wrap_status_check(getattr(status, name)))
  # OptimizerV2's slots (TF 2.4's class) are checked at restore time too.
  v2 = tf_keras.optimizers.legacy.Optimizer
  journal.set_attr(v2, "_create_or_restore_slot_variable",
                   restore.wrap_v2_create_or_restore_slot_variable(
                       _private_api.tf_keras_v2_create_or_restore_slot_variable(
                           v2)))


def _patch_loading(journal, replace):
  """tf_keras's `load_model`, optimizer configs and H5 weights (`h5`)."""
  load_model = tf_keras.models.load_model
  replace(load_model, h5.wrap_load_model(load_model))
  for name, wrap in (("deserialize", h5.wrap_optimizers_deserialize),
                     ("get", h5.wrap_optimizers_get)):
    original = getattr(tf_keras.optimizers, name)
    replace(original, wrap(original))
  journal.set_attr(tf_keras.Model, "load_weights",
                   h5.wrap_load_weights(tf_keras.Model.load_weights))


def wrap_get_optimizer(original: Callable[..., Any]) -> Callable[..., Any]:
  """`Model._get_optimizer`, wrapping by a `PolicyV1`'s loss scale (TF 2.3;
  tf_keras wraps only for "mixed_float16", with dynamic scaling)."""

  def _get_optimizer(self, optimizer):
    policy = self.dtype_policy
    if not isinstance(policy, classes.PolicyV1):
      return original(self, optimizer)
    loss_scale = policy.loss_scale

    def single(opt):
      opt = tf_keras.optimizers.get(opt)
      if (loss_scale is not None and
          not isinstance(opt, classes.LossScaleOptimizer)):
        opt = classes.LossScaleOptimizerV1(opt, loss_scale)
      return opt

    return tf.nest.map_structure(single, optimizer)

  return _get_optimizer


def restore_tf22_dependencies(journal_set_attr: Callable[..., None]) -> None:
  """Makes TF 2.2 checkpoints restore the wrapped optimizer's own variables.

  TF 2.2 saved it under `optimizer/base_optimizer/`, whence TF 2.4 (and
  tf_keras) restore only its slots: the stand-in at that edge looks the rest
  up in the wrapped optimizer, and still saves nothing (TF 2.4's layout).
  """
  cls = _private_api.tf_keras_tf22_restoration_class()
  journal_set_attr(cls, "_lookup_dependency", _lookup_in_wrapped)
  journal_set_attr(cls, "_deferred_dependencies",
                   property(_deferred_in_wrapped))


def restore_tf24_members(journal_set_attr: Callable[..., None]) -> None:
  """Gives the loss-scale optimizer of current optimizers TF 2.4's members.

  `get_gradients` (for graph-mode trainers), `tf24_members.MEMBERS` (slots,
  weights, clipping, hyperparameters) and the `OptimizerV2` private methods
  jobs call (`optimizers._optimizer_v2_methods`): TF 2.3/2.4's class had
  them; tf_keras's `LossScaleOptimizerV3` does not define them.
  """
  members = dict(tf24_members.MEMBERS, get_gradients=_get_gradients,
                 **_optimizer_v2_methods.METHODS)
  for name, member in members.items():
    if name not in vars(_LSO_V3):
      journal_set_attr(_LSO_V3, name, member)


def _get_gradients(self, loss, params):
  # Clipping stays where tf_keras's current optimizers do it: in the apply.
  return _step.graph_gradients(self, loss, params)


def _lookup_in_wrapped(self, name, cached_dependencies=None):
  del cached_dependencies
  return _private_api.lookup_dependency(self._optimizer, name)


def _deferred_in_wrapped(self):
  return _private_api.deferred_dependencies(self._optimizer)
