"""NCF's Keras main: a flag's loss scale, a custom loop densifying gradients.

    python model_garden_ncf.py OUT.json

Source: tensorflow/models, official/recommendation/ncf_keras_main.py,
stored at 00d83f37e2de5852699ed339d0c51085ab065651.

Reduced: absl flags decide everything: `--dtype=fp16` with
`--fp16_implementation=keras` sets the TF 2.4 `set_global_policy('mixed_float16')`;
the loss scale comes from `--loss_scale` (unset here, so the fp16 default
'dynamic'): 'dynamic' wraps Adam in `LossScaleOptimizer(opt)`, a number would
wrap it with `dynamic=False, initial_scale=...`. With `--keras_use_ctl` a
custom loop under a strategy (one device here) runs a `tf.function` step: the
float32-cast logits give a summed, batch-normalised loss, scaled by
`get_scaled_loss` when `FLAGS.dtype == 'fp16'`; the gradients (an embedding
table's are IndexedSlices) are unscaled under the same test, densified with
`tf.convert_to_tensor`, and applied. The step returns the SCALED loss (as the
job does: it reports `train_loss` after `get_scaled_loss`), so the logged loss
is the scaled one. The model and optimizer are checkpointed at the end.
Edits: a tiny embedding-plus-MLP stand-in whose item ids are drawn from the
input inside a layer; no eval loop, summaries or callbacks.
"""

import os
import sys
import tempfile

from absl import flags
import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

from _reduce import STEPS, Log, batch, seed

flags.DEFINE_string('dtype', 'fp16', 'fp32 or fp16.')
flags.DEFINE_string('fp16_implementation', 'keras', 'keras or graph_rewrite.')
flags.DEFINE_string('loss_scale', None, "'dynamic' or a number.")
flags.DEFINE_bool('keras_use_ctl', True, 'Use a custom training loop.')
flags.DEFINE_bool('run_eagerly', False, 'Do not wrap the step in tf.function.')
FLAGS = flags.FLAGS
FLAGS(sys.argv[:1])
PARAMS = {'batch_size': 8, 'learning_rate': 0.005, 'beta1': 0.9,
          'beta2': 0.999, 'epsilon': 1e-8}


def get_loss_scale(flags_obj, default_for_fp16):
  """The flag's loss scale: 'dynamic' or a number; the fp16 default if unset."""
  if flags_obj.loss_scale == 'dynamic':
    return flags_obj.loss_scale
  if flags_obj.loss_scale is not None:
    return float(flags_obj.loss_scale)
  if flags_obj.dtype == 'fp32':
    return 1
  return default_for_fp16


class ItemEmbedding(tf.keras.layers.Layer):
  """Looks item ids (taken from the input) up in an embedding table."""

  def __init__(self, num_items, width, **kwargs):
    super().__init__(**kwargs)
    self.num_items = num_items
    self.width = width

  def build(self, input_shape):
    self.table = self.add_weight(name='table',
                                 shape=(self.num_items, self.width))

  def call(self, inputs):
    ids = tf.math.floormod(
        tf.cast(tf.abs(inputs[:, 0]) * 10.0, tf.int32), self.num_items)
    return tf.gather(self.table, ids)


def get_keras_model():
  inputs = tf.keras.Input(shape=(4,))
  item = ItemEmbedding(5, 4)(inputs)
  hidden = tf.keras.layers.Dense(8, activation='relu')(
      tf.keras.layers.concatenate([inputs, item]))
  logits = tf.keras.layers.Dense(2, dtype='float32')(hidden)
  model = tf.keras.Model(inputs, logits)
  seed(model)
  return model


def sparse_to_dense_grads(grads_and_vars):
  return [(tf.convert_to_tensor(grad), var) for grad, var in grads_and_vars]


if FLAGS.dtype == 'fp16' and FLAGS.fp16_implementation == 'keras':
  tf.keras.mixed_precision.set_global_policy('mixed_float16')

strategy = tf.distribute.OneDeviceStrategy('/cpu:0')
with strategy.scope():
  keras_model = get_keras_model()
  optimizer = tf.keras.optimizers.Adam(
      learning_rate=PARAMS['learning_rate'], beta_1=PARAMS['beta1'],
      beta_2=PARAMS['beta2'], epsilon=PARAMS['epsilon'])
  if FLAGS.dtype == 'fp16':
    loss_scale = get_loss_scale(FLAGS, default_for_fp16='dynamic')
    if loss_scale == 'dynamic':
      optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
    else:
      optimizer = tf.keras.mixed_precision.LossScaleOptimizer(
          optimizer, dynamic=False, initial_scale=loss_scale)

loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
    reduction='sum', from_logits=True)


def train_step(train_iterator):
  """One step of the strategy's replicas; the summed (scaled) loss."""

  def step_fn(features):
    x, y = features
    labels = tf.cast(y > 0.0, tf.int32)
    with tf.GradientTape() as tape:
      softmax_logits = tf.cast(keras_model(x), 'float32')
      loss = loss_object(labels, softmax_logits)
      loss *= (1.0 / PARAMS['batch_size'])
      if FLAGS.dtype == 'fp16':
        loss = optimizer.get_scaled_loss(loss)
    grads = tape.gradient(loss, keras_model.trainable_variables)
    if FLAGS.dtype == 'fp16':
      grads = optimizer.get_unscaled_gradients(grads)
    grads = sparse_to_dense_grads(
        list(zip(grads, keras_model.trainable_variables)))
    optimizer.apply_gradients(grads)
    return loss

  per_replica_losses = strategy.run(step_fn, args=(next(train_iterator),))
  return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses,
                         axis=None)


if not FLAGS.run_eagerly:
  train_step = tf.function(train_step)

xs, ys = zip(*[batch(i) for i in range(STEPS)])
train_input_dataset = tf.data.Dataset.from_tensor_slices(
    (tf.concat(xs, 0), tf.concat(ys, 0))).batch(PARAMS['batch_size'])
train_input_iterator = iter(
    strategy.experimental_distribute_dataset(train_input_dataset))
log = Log(keras_model)
for step in range(STEPS):
  log.step(train_step(train_input_iterator), optimizer)

checkpoint = tf.train.Checkpoint(model=keras_model, optimizer=optimizer)
checkpoint.save(os.path.join(tempfile.mkdtemp(), 'ctl_checkpoint'))
log.save()
