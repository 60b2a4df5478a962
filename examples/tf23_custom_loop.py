"""A TF 2.3-era custom training loop under mixed precision.

Written as TF 2.3's mixed-precision guide taught it: the experimental Keras
API, a float32 output layer, `get_scaled_loss` / `get_unscaled_gradients` in a
`tf.GradientTape` loop. The only line added for today's TensorFlow is the
marked install import.
"""

import numpy as np
import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import
from tensorflow.keras import layers
from tensorflow.keras.mixed_precision import experimental as mixed_precision

policy = mixed_precision.Policy('mixed_float16')
mixed_precision.set_policy(policy)
print('Compute dtype: %s' % policy.compute_dtype)
print('Variable dtype: %s' % policy.variable_dtype)

rng = np.random.RandomState(0)
x_train = rng.normal(size=(512, 16)).astype('float32')
y_train = (4. * x_train @ rng.normal(size=(16, 1))).astype('float32')
dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(64)

inputs = tf.keras.Input(shape=(16,), name='features')
x = layers.Dense(64, activation='relu', name='dense_1')(inputs)
x = layers.Dense(64, activation='relu', name='dense_2')(x)
x = layers.Dense(1, name='dense_logits')(x)
outputs = layers.Activation('linear', dtype='float32', name='predictions')(x)
model = tf.keras.Model(inputs=inputs, outputs=outputs)

optimizer = tf.keras.optimizers.SGD(learning_rate=0.002, momentum=0.9)
optimizer = mixed_precision.LossScaleOptimizer(optimizer, loss_scale='dynamic')
loss_object = tf.keras.losses.MeanSquaredError()


@tf.function
def train_step(x, y):
  with tf.GradientTape() as tape:
    predictions = model(x, training=True)
    loss = loss_object(y, predictions)
    scaled_loss = optimizer.get_scaled_loss(loss)
  scaled_gradients = tape.gradient(scaled_loss, model.trainable_variables)
  gradients = optimizer.get_unscaled_gradients(scaled_gradients)
  finite = tf.reduce_all(
      [tf.reduce_all(tf.math.is_finite(g)) for g in gradients])
  optimizer.apply_gradients(zip(gradients, model.trainable_variables))
  return loss, finite


losses = []
overflows = 0
for epoch in range(4):
  for x, y in dataset:
    loss, finite = train_step(x, y)
    losses.append(float(loss))
    overflows += int(not finite)
print('steps: %d' % len(losses))
print('overflowed (skipped) steps: %d' % overflows)
print('loss: %.4f -> %.4f' % (losses[0], losses[-1]))
