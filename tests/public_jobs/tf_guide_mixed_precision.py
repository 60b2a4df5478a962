"""TensorFlow's mixed precision guide (TF 2.4 API): `fit`, then a custom loop.

Original: tensorflow/docs, site/en/guide/mixed_precision.ipynb, commit
003388b7d170ce2a03a92f79bc02a838c4819a2f (the guide's TF 2.4 text:
`from tensorflow.keras import mixed_precision`, non-experimental API).

Calls kept as the guide makes them, in its order: `Policy('mixed_float16')`,
`set_global_policy(policy)` and `set_global_policy('mixed_float16')`, a
functional model of two `Dense` layers with `x.dtype.name` /
`dense1.kernel.dtype.name` prints, `Dense(10)` then
`Activation('softmax', dtype='float32')`, `compile(loss=
'sparse_categorical_crossentropy', optimizer=RMSprop(), metrics=['accuracy'])`
(TF 2.4 wraps the optimizer in a LossScaleOptimizer there), `get_weights`,
`fit(..., batch_size=8192, validation_split=0.2)`, `evaluate`; then
`LossScaleOptimizer(RMSprop())`, a `tf.function` train step with
`get_scaled_loss` / `get_unscaled_gradients` / `apply_gradients`,
`set_weights(initial_weights)` and the epoch loop with `metrics.Mean` and
`SparseCategoricalAccuracy`.

Shrunk: MNIST replaced by 40 seeded synthetic samples of 20 features (so
one batch of 8192 holds every sample: one step per epoch), 64 units -> 8,
`fit` epochs 5 -> 4, custom-loop epochs 5 -> 6; the initial weights are set
from a seeded NumPy stream (TF versions draw different initial values).
Non-finite steps: one input feature is large, so the float16 gradients
overflow while the loss scale is
high and the dynamic loss scale halves until they fit, as the guide describes
for the first steps of training. The guide checkpoints nothing; this job
saves `tf.train.Checkpoint(model=model, optimizer=optimizer)` after 3
custom-loop epochs (`--out`) and `--resume` restores it and runs the last 3.
"""

import os
import sys

import numpy as np
import tensorflow as tf

from tensorflow import keras
from tensorflow.keras import layers
from tensorflow.keras import mixed_precision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jobreport  # pylint: disable=g-import-not-at-top,wrong-import-position

args = jobreport.parse_args()
tf.random.set_seed(7)
rng = np.random.RandomState(7)

policy = mixed_precision.Policy('mixed_float16')
mixed_precision.set_global_policy(policy)
mixed_precision.set_global_policy('mixed_float16')
print('Compute dtype: %s' % policy.compute_dtype)
print('Variable dtype: %s' % policy.variable_dtype)

inputs = keras.Input(shape=(20,), name='digits')
num_units = 8
dense1 = layers.Dense(num_units, activation='relu', name='dense_1')
x = dense1(inputs)
dense2 = layers.Dense(num_units, activation='relu', name='dense_2')
x = dense2(x)
print(dense1.dtype_policy)
print('x.dtype: %s' % x.dtype.name)
print('dense1.kernel.dtype: %s' % dense1.kernel.dtype.name)
x = layers.Dense(10, name='dense_logits')(x)
outputs = layers.Activation('softmax', dtype='float32', name='predictions')(x)
print('Outputs dtype: %s' % outputs.dtype.name)

model = keras.Model(inputs=inputs, outputs=outputs)
model.compile(loss='sparse_categorical_crossentropy',
              optimizer=keras.optimizers.RMSprop(),
              metrics=['accuracy'])

x_train = rng.uniform(size=(40, 20)).astype('float32')
x_train[:, 0] *= 60.
y_train = rng.randint(0, 10, size=(40,)).astype('int64')
x_test, y_test = x_train[:8], y_train[:8]

# Harness: seeded weights, the same on every TF version (their initializers'
# random streams differ).
model.set_weights([rng.uniform(-0.5, 0.5, size=w.shape).astype(w.dtype)
                   for w in model.get_weights()])
initial_weights = model.get_weights()
step = 0


class _Record(keras.callbacks.Callback):
  """Harness: one line per `fit` step."""

  def on_train_batch_begin(self, batch, logs=None):
    self.before = jobreport.values(model.trainable_weights)

  def on_train_batch_end(self, batch, logs=None):
    global step
    jobreport.emit(jobreport.keras_record(
        step, model.optimizer, self.before,
        jobreport.values(model.trainable_weights)))
    step += 1


if not args.resume:
  history = model.fit(x_train, y_train,
                      batch_size=8192,
                      epochs=4,
                      validation_split=0.2,
                      callbacks=[_Record()], verbose=0)
  test_scores = model.evaluate(x_test, y_test, verbose=2)
  print('Test loss:', test_scores[0])
  print('Test accuracy:', test_scores[1])

optimizer = keras.optimizers.RMSprop()
optimizer = mixed_precision.LossScaleOptimizer(optimizer)

loss_object = tf.keras.losses.SparseCategoricalCrossentropy()
train_dataset = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
                 .shuffle(10000).batch(8192))
test_dataset = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(8192)


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

checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
first_epoch = 0
if args.resume:
  checkpoint.restore(tf.train.latest_checkpoint(args.resume))
  first_epoch = 3
  step = 4 + 3

for epoch in range(first_epoch, 6):
  epoch_loss_avg = tf.keras.metrics.Mean()
  test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(
      name='test_accuracy')
  for x, y in train_dataset:
    before = jobreport.values(model.trainable_variables)
    loss = train_step(x, y)
    epoch_loss_avg(loss)
    jobreport.emit(jobreport.keras_record(
        step, optimizer, before, jobreport.values(model.trainable_variables)))
    step += 1
  for x, y in test_dataset:
    predictions = test_step(x)
    test_accuracy.update_state(y, predictions)
  print('Epoch {}: loss={}, test accuracy={}'.format(
      epoch, epoch_loss_avg.result(), test_accuracy.result()))
  if epoch == 2 and args.out:
    jobreport.checkpoint_event(
        checkpoint.save(os.path.join(args.out, 'ckpt')))
