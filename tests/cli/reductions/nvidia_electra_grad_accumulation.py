"""NVIDIA's ELECTRA pre-training: unscaled gradients accumulated, then one apply.

    python nvidia_electra_grad_accumulation.py OUT.json

Source: NVIDIA/DeepLearningExamples, TensorFlow2/LanguageModeling/ELECTRA/run_pretraining.py
@ 0cbadd7d494f3c199c8b1c678e7d73d8eee49453

Reduced: with `amp`, an experimental `Policy('mixed_float16',
loss_scale='dynamic')` is set globally and the optimizer is wrapped in the
experimental `LossScaleOptimizer(optimizer, "dynamic")`. `train_one_step`, a
`tf.function` taking the config, model, optimizer and accumulator as
arguments, scales the loss, takes the gradients, UNSCALES them per
micro-batch (`get_unscaled_gradients`) and adds them to a variable-backed
gradient accumulator (its variables made on the first call, inside the
`tf.function`); on the first step (`local_step == 1`) or when `local_step %
gradient_accumulation_steps == 0` it divides the accumulated sum by the
accumulation steps (the Horovod all-reduce's place: one worker here), clips
by global norm 1.0, applies, and resets the accumulator, so the overflow
check happens on the accumulated, clipped gradients at the apply, and an
overflowing micro-batch spoils the whole accumulated step. It returns the
unscaled (stop-gradient) loss. The step counter is refreshed from
`optimizer.iterations` after each full accumulation, as the job does, and
the loss scale is read for the log line.
Left out: Horovod, the ELECTRA model (two Dense layers), AdamWeightDecay and
its schedule (plain Adam), metrics and checkpoints.
"""

import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

from _reduce import STEPS, Log, batch, seed


class PretrainingConfig(object):

  def __init__(self, **kwargs):
    self.amp = True
    self.gradient_accumulation_steps = 2
    self.learning_rate = 5e-4
    self.__dict__.update(kwargs)


class GradientAccumulator(object):
  """Sums gradients in variables it makes when it first sees them."""

  def __init__(self):
    self._gradients = []
    self._accum_steps = tf.Variable(0, dtype=tf.int64, trainable=False)

  @property
  def gradients(self):
    return [None if g is None else g.value() for g in self._gradients]

  def __call__(self, gradients):
    if not self._gradients:
      self._gradients.extend([
          None if g is None else tf.Variable(
              tf.zeros(g.shape, g.dtype), trainable=False)
          for g in gradients])
    if len(gradients) != len(self._gradients):
      raise ValueError('expected %d gradients, got %d' % (
          len(self._gradients), len(gradients)))
    for accum, gradient in zip(self._gradients, gradients):
      if accum is not None and gradient is not None:
        accum.assign_add(gradient)
    self._accum_steps.assign_add(1)

  def reset(self):
    if self._gradients:
      self._accum_steps.assign(0)
    for accum in self._gradients:
      if accum is not None:
        accum.assign(tf.zeros_like(accum))


def pretraining_loss(model, features):
  x, y = features
  return tf.reduce_mean(tf.square(model(x) - y))


@tf.function
def train_one_step(config, model, optimizer, features, accumulator,
                   first_step, take_step, clip_norm=1.0):
  with tf.GradientTape() as tape:
    total_loss = pretraining_loss(model, features)
    unscaled_loss = tf.stop_gradient(total_loss)
    if config.amp:
      total_loss = optimizer.get_scaled_loss(total_loss)
  gradients = tape.gradient(total_loss, model.trainable_variables)
  if config.amp:
    gradients = optimizer.get_unscaled_gradients(gradients)
  accumulator(gradients)
  if first_step or take_step:
    averaged = [
        None if g is None else
        g / tf.cast(config.gradient_accumulation_steps, g.dtype)
        for g in accumulator.gradients]
    clipped, _ = tf.clip_by_global_norm(averaged, clip_norm=clip_norm)
    optimizer.apply_gradients(zip(clipped, model.trainable_variables))
    accumulator.reset()
  return unscaled_loss


config = PretrainingConfig()
if config.amp:
  policy = tf.keras.mixed_precision.experimental.Policy(
      'mixed_float16', loss_scale='dynamic')
  tf.keras.mixed_precision.experimental.set_policy(policy)

model = tf.keras.Sequential([
    tf.keras.Input(shape=(4,)),
    tf.keras.layers.Dense(8, activation='relu'),
    tf.keras.layers.Dense(1, dtype='float32')])
seed(model)

optimizer = tf.keras.optimizers.Adam(learning_rate=config.learning_rate)
accumulator = GradientAccumulator()
if config.amp:
  optimizer = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
      optimizer, 'dynamic')

step = tf.Variable(0)
log = Log(model)
accumulator.reset()
local_step = 0
for i in range(STEPS):
  take_step = local_step % config.gradient_accumulation_steps == 0
  loss = train_one_step(config, model, optimizer, batch(i), accumulator,
                        local_step == 1, take_step=take_step)
  if take_step:
    line = 'Step:%6d, Loss:%10.6f, Loss Scaler: %s' % (
        int(step), float(loss), optimizer.loss_scale if config.amp else 1)
    step.assign(int(optimizer.iterations))
  local_step += 1
  log.step(loss, optimizer)
log.save()
