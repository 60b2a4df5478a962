"""TF 2.3 custom loop whose wrapper never scales: raw gradients, clipped.

    python tf23_never_scaled_clipped.py OUT.json

The shape the issue found in an object-detection trainer: the experimental
LossScaleOptimizer with a dynamic scale, the loss never scaled, the raw
gradients clipped by their global norm and applied through the wrapper,
which in TF 2.3/2.4 only checked them for finiteness (and skipped the
overflowing step, halving its unused scale).
"""

import sys

import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import
from tensorflow.keras.mixed_precision import experimental as mixed_precision

from _data import batch, make_model, save

mixed_precision.set_policy('mixed_float16')
model = make_model()
optimizer = tf.keras.optimizers.SGD(0.01, momentum=0.9)
optimizer = mixed_precision.LossScaleOptimizer(optimizer, loss_scale='dynamic')


@tf.function
def train_step(x, y):
  with tf.GradientTape() as tape:
    loss = tf.reduce_mean(tf.square(model(x) - y))
  grads = tape.gradient(loss, model.trainable_variables)
  grads, _ = tf.clip_by_global_norm(grads, 5.0)
  optimizer.apply_gradients(zip(grads, model.trainable_variables))
  return loss


history = []
for i in range(10):
  x, y = batch(i)
  if i == 4:
    x *= 1e3  # raw float16 gradients overflow too
  loss = train_step(x, y)
  history.append({'loss': float(loss)})
save(sys.argv[1], history=history,
     weights=[w.tolist() for w in model.get_weights()])
