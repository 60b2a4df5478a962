"""TF 2.4 custom loop with the optimizer from a config factory.

    python tf24_factory_loop.py OUT.json

Model Garden's shape: `configure_optimizer(...)` wraps the optimizer in TF
2.4's LossScaleOptimizer when float16 is on; the loop reads `loss_scale`,
`dynamic_counter` and `lr`, and checks `isinstance` against the class.
"""

import sys

import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import
from tensorflow.keras import mixed_precision

from _data import batch, make_model, save


def configure_optimizer(optimizer, use_float16=False):
  if use_float16:
    optimizer = mixed_precision.LossScaleOptimizer(
        optimizer, dynamic=True, initial_scale=2**10, dynamic_growth_steps=3)
  return optimizer


mixed_precision.set_global_policy('mixed_float16')
model = make_model()
optimizer = configure_optimizer(tf.keras.optimizers.SGD(0.01, momentum=0.5),
                                use_float16=True)
assert isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer)


@tf.function
def train_step(x, y):
  with tf.GradientTape() as tape:
    loss = tf.reduce_mean(tf.square(model(x) - y))
    scaled_loss = optimizer.get_scaled_loss(loss)
  grads = optimizer.get_unscaled_gradients(
      tape.gradient(scaled_loss, model.trainable_variables))
  optimizer.apply_gradients(zip(grads, model.trainable_variables))
  return loss


history = []
for i in range(12):
  loss = train_step(*batch(i))
  history.append({'loss': float(loss),
                  'loss_scale': float(optimizer.loss_scale),
                  'counter': int(optimizer.dynamic_counter),
                  'iterations': int(optimizer.iterations),
                  'lr': float(optimizer.lr)})
save(sys.argv[1], history=history,
     weights=[w.tolist() for w in model.get_weights()])
