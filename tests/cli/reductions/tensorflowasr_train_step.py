"""TensorFlowASR's BaseModel: compile wraps the optimizer, train_step scales the loss, fit.

    python tensorflowasr_train_step.py OUT.json

Source: TensorSpeech/TensorFlowASR, tensorflow_asr/models/base_model.py
@ c6eeb03476e28026796d39acf382b7ae68232c81

Reduced: a `tf.keras.Model` subclass whose `compile(loss, optimizer)`
resolves the optimizer with `tf.keras.optimizers.get` and, unless a TPU is
present, wraps it in `mixed_precision.experimental.LossScaleOptimizer(opt,
"dynamic")` (the experimental class, used under TF 2.4) and sets its own
`use_loss_scale` flag. Its overridden `train_step` calls the
compiled `self.loss(y_true, y_pred)` under a tape, scales it with
`self.optimizer.get_scaled_loss` when the flag is set, takes the tape's
gradients of the scaled loss, unscales them with `get_unscaled_gradients`
and applies them with nothing in between; `fit` drives it (batch size 8, one
batch a step); the logged loss is the batch's.
Edits: the job's scripts turn float16 on with the grappler
`auto_mixed_precision` rewrite, which does nothing on a CPU; here the TF 2.4
`mixed_float16` global policy makes the float16 compute (so the run fails
under TF 2.3). `env_util.has_devices("TPU")` is
`tf.config.list_logical_devices("TPU")`; no save/load wrappers, no
`experimental_steps_per_execution`. The job keeps its own `Mean` loss
metric in a dict it assigns in `compile` (`metrics` returns its values) and
returns its running mean: Keras 3 refuses state added to a built model, and
the metric's variables would count as the model's weights, so here
`train_step` returns the batch loss and there is no metric.
"""

import numpy as np
import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import
from tensorflow.keras import mixed_precision as mxp

from _reduce import STEPS, Log, batch, seed


class BaseModel(tf.keras.Model):
  """The job's base model: its compile and train_step."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.use_loss_scale = False

  def compile(self, loss, optimizer, run_eagerly=None, **kwargs):
    if not tf.config.list_logical_devices('TPU'):
      optimizer = mxp.experimental.LossScaleOptimizer(
          tf.keras.optimizers.get(optimizer), 'dynamic')
      self.use_loss_scale = True
    super().compile(optimizer=optimizer, loss=loss, run_eagerly=run_eagerly,
                    **kwargs)

  def train_step(self, batch_):
    inputs, y_true = batch_
    with tf.GradientTape() as tape:
      y_pred = self(inputs, training=True)
      loss = self.loss(y_true, y_pred)
      if self.use_loss_scale:
        scaled_loss = self.optimizer.get_scaled_loss(loss)
    if self.use_loss_scale:
      gradients = tape.gradient(scaled_loss, self.trainable_weights)
      gradients = self.optimizer.get_unscaled_gradients(gradients)
    else:
      gradients = tape.gradient(loss, self.trainable_weights)
    self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
    return {'loss': loss}


class TinyModel(BaseModel):
  """Stands in for the job's acoustic models (Conformer, ...)."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.hidden = tf.keras.layers.Dense(8, activation='relu')
    self.out = tf.keras.layers.Dense(1, dtype='float32')

  def call(self, inputs, training=False):
    return self.out(self.hidden(inputs))


class StepLog(tf.keras.callbacks.Callback):

  def __init__(self, log):
    super().__init__()
    self.log = log

  def on_train_batch_end(self, batch_index, logs=None):
    self.log.step(logs['loss'], self.model.optimizer)


mxp.set_global_policy('mixed_float16')
model = TinyModel()
model(tf.zeros((1, 4)))
seed(model)
model.compile(loss=tf.keras.losses.MeanSquaredError(),
              optimizer=tf.keras.optimizers.SGD(0.01, momentum=0.9))

batches = [batch(i) for i in range(STEPS)]
data = tf.data.Dataset.from_tensor_slices(
    (np.concatenate([b[0] for b in batches]),
     np.concatenate([b[1] for b in batches]))).batch(8)
log = Log(model)
model.fit(data, epochs=1, steps_per_epoch=STEPS, callbacks=[StepLog(log)],
          verbose=0)
log.save()
