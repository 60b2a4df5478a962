"""A TF 2.4-era distributed custom training loop under mixed precision.

TF 2.4's non-experimental API: `mixed_precision.set_global_policy` and
`mixed_precision.LossScaleOptimizer(optimizer)`, with `get_scaled_loss` /
`get_unscaled_gradients` inside `strategy.run` under a `MirroredStrategy`. The
only line added for today's TensorFlow is the marked install import.
"""

import numpy as np
import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import
from tensorflow.keras import mixed_precision

# Environment setup: without a GPU, mirror over two logical CPUs.
if tf.config.list_physical_devices('GPU'):
  devices = None
else:
  tf.config.set_logical_device_configuration(
      tf.config.list_physical_devices('CPU')[0],
      [tf.config.LogicalDeviceConfiguration()] * 2)
  devices = ['/cpu:0', '/cpu:1']

mixed_precision.set_global_policy('mixed_float16')
strategy = tf.distribute.MirroredStrategy(devices)
print('replicas: %d' % strategy.num_replicas_in_sync)

GLOBAL_BATCH_SIZE = 64
rng = np.random.RandomState(2)
x_train = rng.normal(size=(512, 16)).astype('float32')
y_train = (4. * x_train @ rng.normal(size=(16, 1))).astype('float32')
dataset = tf.data.Dataset.from_tensor_slices(
    (x_train, y_train)).batch(GLOBAL_BATCH_SIZE)
dist_dataset = strategy.experimental_distribute_dataset(dataset)

with strategy.scope():
  # Seeded initializers make the run (and its loss-scale trajectory)
  # repeatable.
  model = tf.keras.Sequential([
      tf.keras.layers.Dense(
          64, activation='relu', input_shape=(16,),
          kernel_initializer=tf.keras.initializers.GlorotUniform(seed=1)),
      tf.keras.layers.Dense(
          1, kernel_initializer=tf.keras.initializers.GlorotUniform(seed=2)),
      tf.keras.layers.Activation('linear', dtype='float32'),
  ])
  optimizer = mixed_precision.LossScaleOptimizer(
      tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
      dynamic_growth_steps=10)


def step_fn(x, y):
  with tf.GradientTape() as tape:
    predictions = model(x, training=True)
    per_example_loss = tf.reduce_mean(tf.square(predictions - y), axis=-1)
    loss = tf.nn.compute_average_loss(
        per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)
    scaled_loss = optimizer.get_scaled_loss(loss)
  scaled_gradients = tape.gradient(scaled_loss, model.trainable_variables)
  gradients = optimizer.get_unscaled_gradients(scaled_gradients)
  optimizer.apply_gradients(zip(gradients, model.trainable_variables))
  return loss


@tf.function
def train_step(x, y):
  per_replica_losses = strategy.run(step_fn, args=(x, y))
  return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses,
                         axis=None)


losses, scales = [], [float(optimizer.loss_scale)]
for epoch in range(5):
  for x, y in dist_dataset:
    losses.append(float(train_step(x, y)))
    scales.append(float(optimizer.loss_scale))
skipped = sum(1 for a, b in zip(scales, scales[1:]) if b < a)
print('steps: %d' % len(losses))
print('skipped steps: %d' % skipped)
print('loss scale: %g -> min %g -> %g' % (scales[0], min(scales), scales[-1]))
print('dynamic counter: %d' % optimizer.dynamic_counter.numpy())
print('loss: %.4f -> %.4f' % (losses[0], losses[-1]))
