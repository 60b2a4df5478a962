"""A TF 2.3-era `compile`/`fit` job under mixed precision, with a checkpoint.

`set_policy('mixed_float16')` makes `compile` wrap the optimizer in a dynamic
loss-scale optimizer; the job saves and restores a `tf.train.Checkpoint`. The
only line added for today's TensorFlow is the marked install import.
"""

import os
import tempfile

import numpy as np
import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

tf.keras.mixed_precision.experimental.set_policy('mixed_float16')


def make_model():
  return tf.keras.Sequential([
      tf.keras.layers.Dense(32, activation='relu', input_shape=(8,)),
      tf.keras.layers.Dense(1),
      tf.keras.layers.Activation('linear', dtype='float32'),
  ])


rng = np.random.RandomState(1)
x_train = rng.normal(size=(256, 8)).astype('float32')
y_train = (x_train @ rng.normal(size=(8, 1))).astype('float32')

model = make_model()
model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss='mse')
print('optimizer: %s' % type(model.optimizer).__name__)
print('first layer output dtype: %s'
      % tf.as_dtype(model.layers[0].output.dtype).name)
history = model.fit(x_train, y_train, batch_size=32, epochs=4, verbose=0)
losses = history.history['loss']
print('loss: %.4f -> %.4f' % (losses[0], losses[-1]))

checkpoint_dir = tempfile.mkdtemp()
checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
save_path = checkpoint.save(os.path.join(checkpoint_dir, 'ckpt'))

restored_model = make_model()
restored_model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss='mse')
tf.train.Checkpoint(model=restored_model,
                    optimizer=restored_model.optimizer).restore(save_path)
print('restored iterations: %d' % restored_model.optimizer.iterations.numpy())
print('restored evaluation loss: %.4f' % restored_model.evaluate(
    x_train, y_train, verbose=0))
print('original evaluation loss: %.4f' % model.evaluate(
    x_train, y_train, verbose=0))
