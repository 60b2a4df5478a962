"""A TF 2.4-era `fit` job under MirroredStrategy, resumed from its checkpoint.

TF 2.4's `mixed_precision.set_global_policy('mixed_float16')`, an explicit
`mixed_precision.LossScaleOptimizer`, `model.fit` in `strategy.scope()`, and a
`tf.train.CheckpointManager` that a second model resumes from with the same
loss scale. The only line added for today's TensorFlow is the marked install
import.
"""

import tempfile

import numpy as np
import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

# Environment setup: without a GPU, mirror over two logical CPUs.
if tf.config.list_physical_devices('GPU'):
  devices = None
else:
  tf.config.set_logical_device_configuration(
      tf.config.list_physical_devices('CPU')[0],
      [tf.config.LogicalDeviceConfiguration()] * 2)
  devices = ['/cpu:0', '/cpu:1']

tf.keras.mixed_precision.set_global_policy('mixed_float16')
strategy = tf.distribute.MirroredStrategy(devices)
print('replicas: %d' % strategy.num_replicas_in_sync)

rng = np.random.RandomState(3)
x_train = rng.normal(size=(256, 8)).astype('float32')
y_train = (4. * x_train @ rng.normal(size=(8, 1))).astype('float32')


def build_and_compile():
  model = tf.keras.Sequential([
      tf.keras.layers.Dense(32, activation='relu', input_shape=(8,)),
      tf.keras.layers.Dense(1),
      tf.keras.layers.Activation('linear', dtype='float32'),
  ])
  optimizer = tf.keras.mixed_precision.LossScaleOptimizer(
      tf.keras.optimizers.SGD(learning_rate=0.002, momentum=0.9))
  model.compile(optimizer=optimizer, loss='mse')
  return model


with strategy.scope():
  model = build_and_compile()
history = model.fit(x_train, y_train, batch_size=32, epochs=3, verbose=0)
losses = history.history['loss']
print('loss: %.4f -> %.4f' % (losses[0], losses[-1]))
print('loss scale: %g, dynamic counter: %d, iterations: %d' % (
    model.optimizer.loss_scale, model.optimizer.dynamic_counter.numpy(),
    model.optimizer.iterations.numpy()))

checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
manager = tf.train.CheckpointManager(checkpoint, tempfile.mkdtemp(),
                                     max_to_keep=1)
manager.save()

with strategy.scope():
  resumed = build_and_compile()
  tf.train.Checkpoint(model=resumed, optimizer=resumed.optimizer).restore(
      manager.latest_checkpoint)
history = resumed.fit(x_train, y_train, batch_size=32, epochs=1, verbose=0)
print('resumed loss scale: %g, dynamic counter: %d, iterations: %d' % (
    resumed.optimizer.loss_scale, resumed.optimizer.dynamic_counter.numpy(),
    resumed.optimizer.iterations.numpy()))
print('resumed loss: %.4f' % history.history['loss'][-1])
