"""TF 2.3's mixed precision guide: a policy's loss scale, then a custom loop.

    python tf_guide_r23_custom_loop.py OUT.json

Source: tensorflow/docs, site/en/guide/mixed_precision.ipynb (branch r2.3)
@ 47b065156a75323da0e60416e51923a9321f2a13

Reduced: the guide's experimental API end to end. The global
`mixed_float16` policy is set with `set_policy`; its `loss_scale` (a
`DynamicLossScale`) is read and printed, and a second policy,
`Policy('mixed_float16', loss_scale=1024)`, is built only to print its
`FixedLossScale` (never used for training). The functional model ends in a
float32 linear `Activation`; its first weights are kept and set back before
the custom loop. A fresh `RMSprop` is wrapped in
`LossScaleOptimizer(opt, loss_scale='dynamic')`; the `tf.function` step
scales the loss inside the tape, takes the tape's gradients of the scaled
loss, unscales them and applies them (nothing in between). Each epoch
averages the step losses with a `Mean` metric and runs a `tf.function` test
step. Edits: the MNIST digits and their cross-entropy are replaced by
`batch(i)` and a mean squared error (test metric: mean absolute error), no
shuffle, one epoch of STEPS batches; 4 units per hidden layer (with 8,
RMSprop's magnitude-free first steps turn TF 2.21's other float16 rounding
into weight differences past the test's tolerance); the guide's earlier
`compile`/`fit` section is left out.
"""

import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

from tensorflow import keras
from tensorflow.keras import layers
from tensorflow.keras.mixed_precision import experimental as mixed_precision

from _reduce import STEPS, Log, batch, seed

policy = mixed_precision.Policy('mixed_float16')
mixed_precision.set_policy(policy)
print('Compute dtype: %s' % policy.compute_dtype)
print('Variable dtype: %s' % policy.variable_dtype)

inputs = keras.Input(shape=(4,), name='features')
hidden = layers.Dense(4, activation='relu', name='dense_1')(inputs)
hidden = layers.Dense(4, activation='relu', name='dense_2')(hidden)
hidden = layers.Dense(1, name='dense_out')(hidden)
outputs = layers.Activation('linear', dtype='float32', name='prediction')(
    hidden)
model = keras.Model(inputs=inputs, outputs=outputs)
seed(model)
initial_weights = model.get_weights()

# The policy's own scale, then a fixed one only to show it.
loss_scale = policy.loss_scale
print('Loss scale: %s' % loss_scale)
new_policy = mixed_precision.Policy('mixed_float16', loss_scale=1024)
print(new_policy.loss_scale)

optimizer = keras.optimizers.RMSprop()
optimizer = mixed_precision.LossScaleOptimizer(optimizer, loss_scale='dynamic')

loss_object = tf.keras.losses.MeanSquaredError()
train_x, train_y = zip(*[batch(i) for i in range(STEPS)])
train_dataset = tf.data.Dataset.from_tensor_slices(
    (tf.concat(train_x, 0), tf.concat(train_y, 0))).batch(8)
test_dataset = tf.data.Dataset.from_tensor_slices(batch(STEPS)).batch(8)


@tf.function
def train_step(x, y):
  with tf.GradientTape() as tape:
    predictions = model(x)
    loss = loss_object(y, predictions)
    scaled_loss = optimizer.get_scaled_loss(loss)
  scaled_gradients = tape.gradient(scaled_loss, model.trainable_variables)
  gradients = optimizer.get_unscaled_gradients(scaled_gradients)
  optimizer.apply_gradients(zip(gradients, model.trainable_variables))
  return loss


@tf.function
def test_step(x):
  return model(x, training=False)


model.set_weights(initial_weights)

log = Log(model)
for epoch in range(1):
  epoch_loss_avg = tf.keras.metrics.Mean()
  test_error = tf.keras.metrics.MeanAbsoluteError(name='test_error')
  for x, y in train_dataset:
    loss = train_step(x, y)
    log.step(loss, optimizer)
    epoch_loss_avg(loss)
  for x, y in test_dataset:
    predictions = test_step(x)
    test_error.update_state(y, predictions)
  print('Epoch {}: loss={}, test error={}'.format(
      epoch, epoch_loss_avg.result(), test_error.result()))
log.save()
