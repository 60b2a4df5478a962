"""Model Garden's task trainer: a config's loss scale, an isinstance-gated loop.

    python model_garden_base_task.py OUT.json

Source: tensorflow/models, official/modeling/performance.py and
official/core/base_task.py (the TF 2.4 API form of `configure_optimizer`),
stored at 00b830c7ca641413f37e5147cf059c89f79b0e8e.

Reduced: `configure_optimizer` wraps the optimizer when float16 is on, with
the config's `loss_scale` ('dynamic' here: a run-time value, "dynamic or a
number"); `train_step` scales the loss and unscales the gradients only when
`isinstance(optimizer, LossScaleOptimizer)`, then applies them in a
`tf.function`.
"""

import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

from _reduce import STEPS, Log, batch, seed

CONFIG = {'runtime': {'mixed_precision_dtype': 'float16',
                      'loss_scale': 'dynamic'}}


def configure_optimizer(optimizer, use_float16=False, loss_scale=None):
  if use_float16:
    if loss_scale in (None, 'dynamic'):
      optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
    else:
      optimizer = tf.keras.mixed_precision.LossScaleOptimizer(
          optimizer, dynamic=False, initial_scale=loss_scale)
  return optimizer


def build_model():
  model = tf.keras.Sequential([
      tf.keras.layers.Dense(8, activation='relu', input_shape=(4,)),
      tf.keras.layers.Dense(1, dtype='float32')])
  seed(model)
  return model


runtime = CONFIG['runtime']
if runtime['mixed_precision_dtype'] == 'float16':
  tf.keras.mixed_precision.set_global_policy('mixed_float16')
model = build_model()
optimizer = configure_optimizer(
    tf.keras.optimizers.SGD(0.01, momentum=0.9),
    use_float16=runtime['mixed_precision_dtype'] == 'float16',
    loss_scale=runtime['loss_scale'])


@tf.function
def train_step(x, y):
  with tf.GradientTape() as tape:
    loss = tf.reduce_mean(tf.square(model(x) - y))
    scaled_loss = loss
    if isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer):
      scaled_loss = optimizer.get_scaled_loss(scaled_loss)
  tvars = model.trainable_variables
  grads = tape.gradient(scaled_loss, tvars)
  if isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer):
    grads = optimizer.get_unscaled_gradients(grads)
  optimizer.apply_gradients(list(zip(grads, tvars)))
  return loss


log = Log(model)
for i in range(STEPS):
  log.step(train_step(*batch(i)), optimizer)
log.save()
