"""The loss-scale optimizers of TF 2.3/2.4, on today's TensorFlow.

The public classes (also exported by the package):

* `loss_scale_optimizer.LossScaleOptimizer`: TF 2.4's Keras class, the loss
  scaling and the step;
* `experimental_loss_scale_optimizer.LossScaleOptimizerV1`: TF 2.3's
  experimental Keras class, configured by a `loss_scale`;
* `compat_v1_optimizer.MixedPrecisionLossScaleOptimizer`: the wrapper of
  `tf.compat.v1` optimizers.

How the Keras classes are built:

* `_inner`: the wrapped optimizer, one adapter per kind (Keras 3, tf_keras
  OptimizerV2) holding every difference between the kinds;
* `_delegation`: the mixin handing hyperparameters, variables, slots and
  checkpoint dependencies to the wrapped optimizer;
* `_keras2_config`: TF 2.3/2.4's optimizer names, hyperparameters, slot names
  and configs, as Keras 3 spells them;
* `_experimental_args`: TF 2.3's `loss_scale` as TF 2.4's arguments (also
  used by `targets.tf_keras.classes`);
* `_step`: strategy support, the `scale_loss` mark, gradient checks,
  apply-or-skip;
* `_gated_apply`: applying a step in a `tf.function` with TF 2.4's result,
  overlapping updates with the backward pass within a memory budget
  (`set_overlap_memory_budget`, exported by the package).

Imports go one way: `_keras2_config` <- `_inner` <- `_delegation` <-
`loss_scale_optimizer` <- `experimental_loss_scale_optimizer`. The
subpackage builds on the loss-scale core (`dynamic_state`, `loss_scale`,
`_grad_checks`); nothing in the core imports it.
"""
