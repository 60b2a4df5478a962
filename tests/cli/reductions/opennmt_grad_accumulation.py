"""OpenNMT-tf's Trainer: get_gradients through the wrapper, accumulated, averaged, applied.

    python opennmt_grad_accumulation.py OUT.json

Source: OpenNMT/OpenNMT-tf, opennmt/training.py
@ ee8e1dd2eb52e0be63387c8dbad9f300c2680488

Reduced: the `Trainer` object wraps its optimizer in TF 2.3's
`experimental.LossScaleOptimizer(opt, "dynamic")` when the grappler option
`auto_mixed_precision` is on (read back with
`tf.config.optimizer.get_experimental_options()`) and the optimizer is not
one already. Its forward function is a `tf.function` that takes the next
batch from a dataset iterator; since it is traced (not eager), the file's
branch calls the wrapper's `get_gradients(loss, variables)` (which scales
the loss and returns unscaled gradients) rather than a tape. With
`accum_steps=2` the unscaled gradients are added into a gradient
accumulator (variables made on the first call, plus a step counter); a
second `tf.function` divides the accumulated gradients by the
accumulator's step count, passes them through the all-reduce stand-in (the
identity on one replica) and applies them with the wrapper's
`apply_gradients`, then resets the accumulator. As in the file, the first
batch is applied alone, then every second one (after batches 0, 1, 3, 5,
...); each apply is one logged step, with the last forward's loss. The
loss scale is never read by the file.
Edits: the float16 compute comes from the experimental `mixed_float16`
policy (the grappler rewrite does nothing on a CPU); no summaries, word
counters, checkpoints or evaluation.
"""

import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

from _reduce import STEPS, Log, batch, seed


class GradientAccumulator(object):
  """Sums gradients across calls; `step` counts the calls since a reset."""

  def __init__(self):
    self._grads = []
    self._count = None

  @property
  def step(self):
    if self._count is None:
      self._count = tf.Variable(tf.constant(0, dtype=tf.int64),
                                trainable=False)
    return self._count.value()

  @property
  def gradients(self):
    return [g.value() for g in self._grads]

  def __call__(self, gradients):
    if not self._grads:
      self.step  # pylint: disable=pointless-statement
      self._grads.extend(
          tf.Variable(tf.zeros_like(g), trainable=False) for g in gradients)
    for total, g in zip(self._grads, gradients):
      total.assign_add(g)
    self._count.assign_add(1)

  def reset(self):
    if not self._grads:
      return
    self._count.assign(0)
    for g in self._grads:
      g.assign(tf.zeros_like(g))


class Trainer(object):
  """The single-replica trainer, kept to the accumulation path."""

  def __init__(self, model, optimizer):
    self._model = model
    self._gradient_accumulator = GradientAccumulator()
    options = tf.config.optimizer.get_experimental_options()
    if (options.get('auto_mixed_precision') and not isinstance(
        optimizer, tf.keras.mixed_precision.experimental.LossScaleOptimizer)):
      optimizer = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
          optimizer, 'dynamic')
    self._optimizer = optimizer

  @property
  def num_replicas(self):
    return 1

  def _all_reduce_sum(self, value):
    return value

  def _run_model(self, source, target):
    outputs = self._model(source, training=True)
    return tf.reduce_mean(tf.square(outputs - target))

  def _compute_gradients(self, source, target):
    if tf.executing_eagerly():
      with tf.GradientTape() as tape:
        loss = self._run_model(source, target)
      gradients = tape.gradient(loss, self._model.trainable_variables)
    else:
      loss = self._run_model(source, target)
      gradients = self._optimizer.get_gradients(
          loss, self._model.trainable_variables)
    return loss, gradients

  def _apply_gradients(self, gradients, scale=1):
    gradient_scale = scale * self.num_replicas
    if tf.is_tensor(gradient_scale) or gradient_scale != 1:
      gradients = [
          self._all_reduce_sum(g / tf.cast(gradient_scale, g.dtype))
          for g in gradients]
    self._optimizer.apply_gradients(
        list(zip(gradients, self._model.trainable_variables)))

  def _forward(self, source, target):
    loss, gradients = self._compute_gradients(source, target)
    self._gradient_accumulator(gradients)
    return loss

  def _step(self):
    self._apply_gradients(self._gradient_accumulator.gradients,
                          scale=self._gradient_accumulator.step)
    self._gradient_accumulator.reset()

  def steps(self, dataset, accum_steps):
    """Yields the loss of each applied step."""
    iterator = iter(dataset)

    @tf.function
    def forward():
      source, target = next(iterator)
      return self._forward(source, target)

    @tf.function
    def step():
      return self._step()

    self._gradient_accumulator.reset()
    i = 0
    while True:
      try:
        loss = forward()
      except tf.errors.OutOfRangeError:
        break
      if i == 0 or (i + 1) % accum_steps == 0:
        step()
        yield loss
      i += 1


tf.config.optimizer.set_experimental_options({'auto_mixed_precision': True})
tf.keras.mixed_precision.experimental.set_policy('mixed_float16')
model = tf.keras.Sequential([
    tf.keras.Input(shape=(4,)),
    tf.keras.layers.Dense(8, activation='relu'),
    tf.keras.layers.Dense(1, dtype='float32')])
seed(model)
trainer = Trainer(model, tf.keras.optimizers.SGD(0.01, momentum=0.9))


def batches():
  for i in range(2 * STEPS):
    yield batch(i)


dataset = tf.data.Dataset.from_generator(
    batches, (tf.float32, tf.float32),
    (tf.TensorShape([8, 4]), tf.TensorShape([8, 1])))
log = Log(model)
for loss in trainer.steps(dataset, accum_steps=2):
  log.step(loss, trainer._optimizer)  # pylint: disable=protected-access
log.save()
