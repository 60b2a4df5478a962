"""EfficientDet's Keras trainer: a `fit` train_step that scales, unscales, clips.

    python automl_efficientdet_train_step.py OUT.json

Source: google/automl, efficientdet/keras/train_lib.py (with the policy and
`compile`/`fit` calls of efficientdet/keras/train.py),
@ f183be7ff84db22ce78f749d81dff068e74afe78.

Reduced: the job sets the TF 2.3 experimental `Policy('mixed_float16')` with
`set_policy`; an optimizer factory builds SGD with momentum on a warmup
learning-rate schedule and, when `mixed_precision` is on, wraps it in the
experimental `LossScaleOptimizer(opt, loss_scale='dynamic')`. A `Model`
subclass overrides `train_step` (run by `fit`): the loss (an L2 weight decay
plus a Huber loss on the float32-cast output, the Huber loss passed by
`compile(loss={...})`) is scaled only when
`isinstance(self.optimizer, ...experimental.LossScaleOptimizer)`, the
gradients of the non-frozen variables are unscaled under the same test, then
clipped with `tf.clip_by_global_norm` (config `clip_gradients_norm`) and
applied; `train_step` returns a dict of losses whose 'loss' is the raw batch
loss (so `logs['loss']` is the batch's loss, not a running mean).
Edits for Keras 3: the weight-decay regex drops the original's `:0$` suffix
(Keras 3 variable names have none); the model is built by a call, not
`build(shape)` (which makes no weights in a Keras 3 subclass); no moving
average (tfa), no callbacks but the logging one.
"""

import re

import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

from _reduce import STEPS, Log, batch, seed

PARAMS = {'mixed_precision': True, 'optimizer': 'sgd', 'momentum': 0.9,
          'learning_rate': 0.02, 'lr_warmup_init': 0.002, 'lr_warmup_step': 4,
          'weight_decay': 4e-5, 'clip_gradients_norm': 10.0,
          'var_freeze_expr': None, 'delta': 0.1}


class WarmupLr(tf.keras.optimizers.schedules.LearningRateSchedule):
  """A linear warmup to a constant rate."""

  def __init__(self, adjusted_lr, lr_warmup_init, lr_warmup_step):
    super().__init__()
    self.adjusted_lr = adjusted_lr
    self.lr_warmup_init = lr_warmup_init
    self.lr_warmup_step = lr_warmup_step

  def __call__(self, step):
    fraction = tf.cast(step, tf.float32) / self.lr_warmup_step
    warm = self.lr_warmup_init + fraction * (
        self.adjusted_lr - self.lr_warmup_init)
    return tf.where(step < self.lr_warmup_step, warm, self.adjusted_lr)

  def get_config(self):
    return {'adjusted_lr': self.adjusted_lr,
            'lr_warmup_init': self.lr_warmup_init,
            'lr_warmup_step': self.lr_warmup_step}


def get_optimizer(params):
  """The factory: an optimizer from params, loss-scaled when mixed."""
  lr = WarmupLr(params['learning_rate'], params['lr_warmup_init'],
                params['lr_warmup_step'])
  if params['optimizer'] == 'sgd':
    optimizer = tf.keras.optimizers.SGD(lr, momentum=params['momentum'])
  else:
    optimizer = tf.keras.optimizers.Adam(lr)
  if params['mixed_precision']:
    optimizer = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
        optimizer, loss_scale='dynamic')
  return optimizer


class DetNetTrain(tf.keras.Model):
  """A stand-in detector with the job's own train_step."""

  def __init__(self, config):
    super().__init__()
    self.config = config
    self.hidden = tf.keras.layers.Dense(8, activation='relu')
    self.head = tf.keras.layers.Dense(1, dtype='float32')

  def call(self, inputs, training=False):
    return self.head(self.hidden(inputs))

  def _freeze_vars(self):
    if self.config['var_freeze_expr']:
      return [v for v in self.trainable_variables
              if not re.match(self.config['var_freeze_expr'], v.name)]
    return self.trainable_variables

  def _reg_l2_loss(self, weight_decay, regex=r'.*(kernel|weight)'):
    pattern = re.compile(regex)
    return weight_decay * tf.add_n([
        tf.nn.l2_loss(v) for v in self.trainable_variables
        if pattern.match(v.name)])

  def train_step(self, data):
    images, labels = data
    with tf.GradientTape() as tape:
      box_outputs = tf.cast(self(images, training=True), tf.float32)
      total_loss = self._reg_l2_loss(self.config['weight_decay'])
      loss_vals = {}
      box_loss = self.loss['box_loss'](labels, box_outputs)
      total_loss += box_loss
      loss_vals['box_loss'] = box_loss
      if isinstance(self.optimizer,
                    tf.keras.mixed_precision.experimental.LossScaleOptimizer):
        scaled_loss = self.optimizer.get_scaled_loss(total_loss)
      else:
        scaled_loss = total_loss
    loss_vals['loss'] = total_loss
    trainable_vars = self._freeze_vars()
    scaled_gradients = tape.gradient(scaled_loss, trainable_vars)
    if isinstance(self.optimizer,
                  tf.keras.mixed_precision.experimental.LossScaleOptimizer):
      gradients = self.optimizer.get_unscaled_gradients(scaled_gradients)
    else:
      gradients = scaled_gradients
    if self.config['clip_gradients_norm'] > 0:
      gradients, gnorm = tf.clip_by_global_norm(
          gradients, self.config['clip_gradients_norm'])
      loss_vals['gnorm'] = gnorm
    self.optimizer.apply_gradients(zip(gradients, trainable_vars))
    return loss_vals


class StepLog(tf.keras.callbacks.Callback):

  def __init__(self, log):
    super().__init__()
    self.log = log

  def on_train_batch_end(self, batch_index, logs=None):
    self.log.step(logs['loss'], self.model.optimizer)


if PARAMS['mixed_precision']:
  policy = tf.keras.mixed_precision.experimental.Policy('mixed_float16')
  tf.keras.mixed_precision.experimental.set_policy(policy)

model = DetNetTrain(PARAMS)
model(tf.zeros((1, 4)))  # Builds the weights.
seed(model)
model.compile(
    optimizer=get_optimizer(PARAMS),
    loss={'box_loss': tf.keras.losses.Huber(PARAMS['delta'])})

xs, ys = zip(*[batch(i) for i in range(STEPS)])
dataset = tf.data.Dataset.from_tensor_slices(
    (tf.concat(xs, 0), tf.concat(ys, 0))).batch(8)
log = Log(model)
model.fit(dataset, epochs=1, steps_per_epoch=STEPS, callbacks=[StepLog(log)],
          verbose=0)
log.save()
