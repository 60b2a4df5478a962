"""The loss-scale optimizers of TF 2.3/2.4, on today's TensorFlow.

* `loss_scale_optimizer.LossScaleOptimizer`: TF 2.4's Keras class;
* `experimental_loss_scale_optimizer.LossScaleOptimizerV1`: TF 2.3's
  experimental Keras class, configured by a `loss_scale`;
* `compat_v1_optimizer.MixedPrecisionLossScaleOptimizer`: the wrapper of
  `tf.compat.v1` optimizers.

The package exports all three; docs/architecture.md maps the private modules.
"""
