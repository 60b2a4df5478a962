"""NVIDIA's UNet Medical: an experimental dynamic LossScaleOptimizer, AMP-gated.

    python nvidia_unet_medical.py OUT.json

Source: NVIDIA/DeepLearningExamples, TensorFlow2/Segmentation/UNet_Medical/runtime/run.py
and runtime/setup.py @ 0cbadd7d494f3c199c8b1c678e7d73d8eee49453

Reduced: with `use_amp`, `set_flags` sets the experimental 'mixed_float16'
policy and `train` wraps Adam in the experimental `LossScaleOptimizer` with
loss scale "dynamic" (passed positionally); the `tf.function` train step adds
two partial losses and an L2 weight-decay term, rebinds `loss` to the scaled
loss when AMP is on, unscales the gradients (AMP-gated), applies them, feeds
the unscaled partial losses to two `Mean` metrics, and returns `loss`, which
is therefore the SCALED loss (what the benchmark branch reads with
`.numpy()`; it is what is logged here). The model and the optimizer go into a
`tf.train.Checkpoint` built before training (the job saves it at the end).
Left out: Horovod (`DistributedGradientTape`, the warm-up broadcast), the
UNet itself (two Dense layers here), the data pipeline; the metrics are read
but not reset (`reset_states` is not in Keras 3).
"""

import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

from _reduce import STEPS, Log, batch, seed


class Params(object):
  use_amp = True
  learning_rate = 5e-4
  weight_decay = 1e-4


def set_flags(params):
  if params.use_amp:
    tf.keras.mixed_precision.experimental.set_policy('mixed_float16')


def partial_losses(predict, target):
  """Two loss terms, as the job's cross-entropy and dice pair."""
  first = tf.reduce_mean(tf.square(predict - target))
  second = tf.reduce_mean(tf.abs(predict - target))
  return first, second


def train(params, model):
  optimizer = tf.keras.optimizers.Adam(learning_rate=params.learning_rate)
  if params.use_amp:
    optimizer = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
        optimizer, 'dynamic')

  ce_loss = tf.keras.metrics.Mean(name='ce_loss')
  f1_loss = tf.keras.metrics.Mean(name='dice_loss')
  checkpoint = tf.train.Checkpoint(optimizer=optimizer, model=model)

  @tf.function
  def train_step(features, labels):
    with tf.GradientTape() as tape:
      output_map = model(features)
      crossentropy_loss, dice_loss = partial_losses(output_map, labels)
      added_losses = tf.add(crossentropy_loss, dice_loss)
      loss = added_losses + params.weight_decay * tf.add_n(
          [tf.nn.l2_loss(v) for v in model.trainable_variables])
      if params.use_amp:
        loss = optimizer.get_scaled_loss(loss)
    gradients = tape.gradient(loss, model.trainable_variables)
    if params.use_amp:
      gradients = optimizer.get_unscaled_gradients(gradients)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    ce_loss(crossentropy_loss)
    f1_loss(dice_loss)
    return loss

  log = Log(model)
  for iteration in range(STEPS):
    loss = train_step(*batch(iteration)).numpy()
    log.step(loss, optimizer)
  float(ce_loss.result() + f1_loss.result())
  log.save()
  return checkpoint


params = Params()
set_flags(params)
unet = tf.keras.Sequential([
    tf.keras.Input(shape=(4,)),
    tf.keras.layers.Dense(8, activation='relu'),
    tf.keras.layers.Dense(1, dtype='float32')])
seed(unet)
train(params, unet)
