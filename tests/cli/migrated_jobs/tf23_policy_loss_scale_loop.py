"""TF 2.3 custom loop: the policy carries the loss scale the optimizer uses.

    python tf23_policy_loss_scale_loop.py OUT.json

The TF 2.3 guide's forms: a `Policy(..., loss_scale=DynamicLossScale(...))`
whose `loss_scale` is printed and handed to the experimental
LossScaleOptimizer, `loss_scale()` read each step, an isinstance check,
`lr`, `variables()` and apply_gradients' op name.
"""

import sys

import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import
from tensorflow.keras.mixed_precision import experimental as mixed_precision

from _data import batch, make_model, save

policy = mixed_precision.Policy(
    'mixed_float16',
    loss_scale=tf.mixed_precision.experimental.DynamicLossScale(
        initial_loss_scale=1024, increment_period=3))
mixed_precision.set_policy(policy)
print('Loss scale: %s' % policy.loss_scale)

model = make_model()
optimizer = tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
optimizer = mixed_precision.LossScaleOptimizer(optimizer, policy.loss_scale)
assert isinstance(optimizer, mixed_precision.LossScaleOptimizer)


@tf.function
def train_step(x, y):
  with tf.GradientTape() as tape:
    loss = tf.reduce_mean(tf.square(model(x) - y))
    scaled_loss = optimizer.get_scaled_loss(loss)
  grads = optimizer.get_unscaled_gradients(
      tape.gradient(scaled_loss, model.trainable_variables))
  optimizer.apply_gradients(zip(grads, model.trainable_variables), 'apply')
  return loss


history = []
for i in range(12):
  loss = train_step(*batch(i))
  history.append({'loss': float(loss),
                  'loss_scale': float(optimizer.loss_scale()),
                  'iterations': int(optimizer.iterations),
                  'lr': float(optimizer.lr)})
assert len(optimizer.variables()) > 0
save(sys.argv[1], history=history,
     weights=[w.tolist() for w in model.get_weights()])
