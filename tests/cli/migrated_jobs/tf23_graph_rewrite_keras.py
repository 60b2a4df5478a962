"""TF 2.3 graph rewrite of a Keras optimizer in a custom loop.

    python tf23_graph_rewrite_keras.py OUT.json

A float32 model; `enable_mixed_precision_graph_rewrite` wraps the Keras
optimizer (dynamic loss scale) and turns on Grappler's rewrite;
`get_scaled_loss`/`get_unscaled_gradients`; the scale read each step; the
rewrite disabled at the end.
"""

import sys

import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

from _data import batch, make_model, save

model = make_model()
opt = tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(
    opt, loss_scale='dynamic')


@tf.function
def train_step(x, y):
  with tf.GradientTape() as tape:
    loss = tf.reduce_mean(tf.square(model(x) - y))
    scaled_loss = opt.get_scaled_loss(loss)
  scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
  grads = opt.get_unscaled_gradients(scaled_grads)
  opt.apply_gradients(zip(grads, model.trainable_variables))
  return loss


history = []
for i in range(10):
  x, y = batch(i)
  if i == 4:
    x *= 1e32  # float32 overflows only far above float16's range
  loss = train_step(x, y)
  history.append({'loss': float(loss), 'loss_scale': float(opt.loss_scale()),
                  'iterations': int(opt.iterations)})
tf.train.experimental.disable_mixed_precision_graph_rewrite()
save(sys.argv[1], history=history,
     weights=[w.tolist() for w in model.get_weights()])
