"""TF Model Garden's BERT custom training loop, with performance.py's helpers.

Original: tensorflow/models' official/ tree as vendored by
DemonDamon/mask-detection-based-on-tf2odapi: official/modeling/performance.py
(commit 5cf203e177ffd8cb4c3877eb0e7b02b015aa058a: `configure_optimizer` and
`set_mixed_precision_policy` with `use_experimental_api`) and
official/nlp/bert/model_training_utils.py (commit
b7748eebefef792103aa05190ce6171d6720c01a: `run_customized_training_loop`,
`_save_checkpoint`, `_get_input_iterator`, `steps_to_run`), with the model
function, loss and metric of official/nlp/bert/run_classifier.py (same
commit: `_get_classifier_model`, `get_loss_fn`, `get_dataset_fn`).

Calls kept in the original's order: `tf.distribute.MirroredStrategy(
devices=["device:CPU:0"])` (what `get_distribution_strategy("mirrored",
num_gpus=0)` builds); `set_mixed_precision_policy(tf.float16,
use_experimental_api=True)`: `tf.keras.mixed_precision.experimental.Policy(
"mixed_float16", loss_scale=None)` and `experimental.set_policy(policy)`;
`iter(strategy.distribute_datasets_from_function(input_fn))` with
`ctx.get_per_replica_batch_size`; `tf.keras.metrics.Mean("training_loss")`;
under the strategy scope the model function: the model, a
`PolynomialDecay` learning rate, the optimizer and `model.optimizer =
configure_optimizer(optimizer, use_float16=True, use_graph_rewrite=False,
loss_scale="dynamic", use_experimental_api=True)`, i.e.
`tf.keras.mixed_precision.experimental.LossScaleOptimizer(optimizer,
loss_scale="dynamic")`; `tf.keras.callbacks.CallbackList(callbacks=None,
model=model)`; `optimizer = model.optimizer`; the replicated step under a
`GradientTape` with the loss divided by `num_replicas_in_sync`, the
`isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer)` check
(the TF 2.4 class, which the experimental one derives from),
`get_scaled_loss` inside `with tape:`, `tape.gradient`,
`get_unscaled_gradients`, `apply_gradients(zip(grads, training_vars))`, the
metric updates; `train_steps` as a `tf.function` running `strategy.run` in a
`tf.range(steps)` loop (the CPU branch) called with
`tf.convert_to_tensor(steps, dtype=tf.int32)`;
`tf.train.Checkpoint(model=model, optimizer=optimizer,
global_step=optimizer.iterations)`, `tf.train.latest_checkpoint(model_dir)`
and `checkpoint.restore`, `current_step = optimizer.iterations.numpy()`; the
loop's `reset_states()`, callbacks and `callable(optimizer.learning_rate)`;
`checkpoint.save(os.path.join(model_dir, "ctl_step_%d.ckpt"))` after each
epoch but the last and at the end.

Shrunk: BERT replaced by a two-layer `Dense` classifier (float32 logits, as
BERT's classification head), GLUE TFRecords by seeded synthetic batches of 4
(8 features, 3 classes, repeated, not shuffled), 2 epochs of 5 steps with
`steps_per_loop=1`, `optimization.create_optimizer`'s AdamWeightDecay by
`tf.keras.optimizers.Adam` on the same `PolynomialDecay` schedule (no
warm-up); no summaries, evaluation, sub-model export, init checkpoint or
flags; initial weights from a seeded NumPy stream. With `--out` the job
copies the model directory after the midway checkpoint (`--resume` names
such a copy, read as the model directory); as the original, a resumed run
reads the dataset from its start. Non-finite steps: the features of the
batches at steps 1, 3 and 7 hold an inf. TF 2.3 lacks
`distribute_datasets_from_function` and the non-experimental class.
"""

import os
import shutil
import sys
import tempfile

from absl import logging
import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jobreport  # pylint: disable=g-import-not-at-top,wrong-import-position

POISONED = (1, 3, 7)
NUM_CLASSES = 3


# official/modeling/performance.py


def configure_optimizer(optimizer, use_float16=False, use_graph_rewrite=False,
                        loss_scale='dynamic', use_experimental_api=False):
  if use_experimental_api:
    logging.warning('Passing use_experimental_api=True is deprecated.')
  if use_float16:
    if use_experimental_api:
      optimizer = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
          optimizer, loss_scale=loss_scale)
    elif loss_scale == 'dynamic':
      optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
    else:
      optimizer = tf.keras.mixed_precision.LossScaleOptimizer(
          optimizer, dynamic=False, initial_scale=loss_scale)
  if use_graph_rewrite:
    optimizer = (
        tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite(
            optimizer))
  return optimizer


def set_mixed_precision_policy(dtype, loss_scale=None,
                               use_experimental_api=False):
  if use_experimental_api:
    logging.warning('Passing use_experimental_api=True is deprecated.')
  assert use_experimental_api or loss_scale is None
  if dtype == tf.float16:
    if use_experimental_api:
      policy = tf.keras.mixed_precision.experimental.Policy(
          'mixed_float16', loss_scale=loss_scale)
      tf.keras.mixed_precision.experimental.set_policy(policy)
    else:
      tf.keras.mixed_precision.set_global_policy('mixed_float16')
  elif dtype == tf.float32:
    if use_experimental_api:
      tf.keras.mixed_precision.experimental.set_policy('float32')
    else:
      tf.keras.mixed_precision.set_global_policy('float32')
  else:
    raise ValueError('Unexpected dtype: %s' % dtype)


# official/nlp/bert/model_training_utils.py


def _save_checkpoint(strategy, checkpoint, model_dir, checkpoint_prefix):
  del strategy  # Single worker: it always exports.
  checkpoint_path = os.path.join(model_dir, checkpoint_prefix)
  saved_path = checkpoint.save(checkpoint_path)
  logging.info('Saving model as TF checkpoint: %s', saved_path)
  return saved_path


def _get_input_iterator(input_fn, strategy):
  if not callable(input_fn):
    raise ValueError('`input_fn` should be a closure that returns a dataset.')
  return iter(strategy.distribute_datasets_from_function(input_fn))


def steps_to_run(current_step, steps_per_epoch, steps_per_loop):
  if steps_per_loop <= 0:
    raise ValueError('steps_per_loop should be positive integer.')
  if steps_per_loop == 1:
    return steps_per_loop
  remainder_in_epoch = current_step % steps_per_epoch
  if remainder_in_epoch != 0:
    return min(steps_per_epoch - remainder_in_epoch, steps_per_loop)
  return steps_per_loop


def run_customized_training_loop(strategy=None, model_fn=None, loss_fn=None,
                                 scale_loss=True, model_dir=None,
                                 train_input_fn=None, steps_per_epoch=None,
                                 steps_per_loop=None, epochs=1,
                                 custom_callbacks=None):
  """The original's training path (no evaluation, summaries or export)."""
  steps_between_evals = int(steps_per_epoch / 1)
  assert tf.executing_eagerly()
  total_training_steps = steps_per_epoch * epochs
  train_iterator = _get_input_iterator(train_input_fn, strategy)
  tf.keras.metrics.Mean('training_loss', dtype=tf.float32)  # The eval one.

  with strategy.scope():
    model, _ = model_fn()
    if not hasattr(model, 'optimizer'):
      raise ValueError('User should set optimizer attribute to model '
                       'inside `model_fn`.')
    callback_list = tf.keras.callbacks.CallbackList(
        callbacks=custom_callbacks, model=model)
    optimizer = model.optimizer
    train_loss_metric = tf.keras.metrics.Mean('training_loss',
                                              dtype=tf.float32)
    training_vars = model.trainable_variables

    def _replicated_step(inputs):
      inputs, labels = inputs
      with tf.GradientTape() as tape:
        model_outputs = model(inputs, training=True)
        loss = loss_fn(labels, model_outputs)
        raw_loss = loss
        if scale_loss:
          loss = loss / strategy.num_replicas_in_sync
      if isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer):
        with tape:
          scaled_loss = optimizer.get_scaled_loss(loss)
        scaled_grads = tape.gradient(scaled_loss, training_vars)
        grads = optimizer.get_unscaled_gradients(scaled_grads)
      else:
        grads = tape.gradient(loss, training_vars)
      optimizer.apply_gradients(zip(grads, training_vars))
      train_loss_metric.update_state(raw_loss)

    @tf.function
    def train_steps(iterator, steps):
      if not isinstance(steps, tf.Tensor):
        raise ValueError('steps should be an Tensor. Python object may cause '
                         'retracing.')
      for _ in tf.range(steps):
        strategy.run(_replicated_step, args=(next(iterator),))

    checkpoint = tf.train.Checkpoint(
        model=model, optimizer=optimizer, global_step=optimizer.iterations)
    latest_checkpoint_file = tf.train.latest_checkpoint(model_dir)
    if latest_checkpoint_file:
      logging.info('Checkpoint file %s found and restoring from checkpoint',
                   latest_checkpoint_file)
      checkpoint.restore(latest_checkpoint_file)

    current_step = optimizer.iterations.numpy()
    checkpoint_name = 'ctl_step_{step}.ckpt'

    logs = {}
    callback_list.on_train_begin()
    while current_step < total_training_steps and not model.stop_training:
      if current_step % steps_per_epoch == 0:
        callback_list.on_epoch_begin(int(current_step / steps_per_epoch) + 1)
      train_loss_metric.reset_states()
      callback_list.on_batch_begin(current_step)
      steps = steps_to_run(current_step, steps_between_evals, steps_per_loop)
      before = jobreport.values(training_vars)  # Harness.
      train_steps(train_iterator, tf.convert_to_tensor(steps, dtype=tf.int32))
      jobreport.emit(jobreport.keras_record(  # Harness.
          current_step, optimizer, before, jobreport.values(training_vars)))
      train_loss = train_loss_metric.result().numpy().astype(float)
      current_step += steps
      if callable(optimizer.learning_rate):
        logging.info('learning rate %s', optimizer.learning_rate(current_step))
      logging.info('Train Step: %d/%d  / loss = %s', current_step,
                   total_training_steps, train_loss)
      if current_step % steps_between_evals:
        callback_list.on_batch_end(current_step - 1, {'loss': train_loss})
      else:
        if current_step < total_training_steps:
          _save_checkpoint(strategy, checkpoint, model_dir,
                           checkpoint_name.format(step=current_step))
          if current_step == jobreport.MIDWAY:
            _keep_midway(model_dir)
        logs['loss'] = train_loss
        callback_list.on_batch_end(current_step - 1, logs)
      if current_step % steps_per_epoch == 0:
        callback_list.on_epoch_end(int(current_step / steps_per_epoch), logs)

    _save_checkpoint(strategy, checkpoint, model_dir,
                     checkpoint_name.format(step=current_step))
    callback_list.on_train_end()
    return model


def _keep_midway(model_dir):
  """Harness: with --out, a copy of the model directory at the midway save."""
  if not args.out:
    return
  folder = os.path.join(args.out, 'midway')
  shutil.copytree(model_dir, folder)
  jobreport.checkpoint_event(tf.train.latest_checkpoint(folder))


# official/nlp/bert/run_classifier.py


def get_loss_fn(num_classes):

  def classification_loss_fn(labels, logits):
    labels = tf.squeeze(labels)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot_labels = tf.one_hot(
        tf.cast(labels, dtype=tf.int32), depth=num_classes, dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(
        tf.cast(one_hot_labels, dtype=tf.float32) * log_probs, axis=-1)
    return tf.reduce_mean(per_example_loss)

  return classification_loss_fn


def get_dataset_fn(global_batch_size):

  def _dataset_fn(ctx=None):
    batch_size = ctx.get_per_replica_batch_size(
        global_batch_size) if ctx else global_batch_size
    rng = np.random.RandomState(5)
    n = global_batch_size * jobreport.STEPS
    features = rng.normal(size=(n, 8)).astype('float32')
    labels = rng.randint(0, NUM_CLASSES, size=(n, 1)).astype('int64')
    for step in POISONED:
      features[step * global_batch_size, 0] = np.inf
    dataset = tf.data.Dataset.from_tensor_slices((features, labels))
    return dataset.repeat().batch(batch_size, drop_remainder=True)

  return _dataset_fn


def classifier_model(num_classes):
  inputs = tf.keras.Input(shape=(8,), name='input_word_ids')
  x = tf.keras.layers.Dense(16, activation='tanh', name='pooler')(inputs)
  logits = tf.keras.layers.Dense(num_classes, dtype='float32',
                                 name='output')(x)
  return tf.keras.Model(inputs, logits), None


def run_bert_classifier(strategy, model_dir, epochs, steps_per_epoch,
                        steps_per_loop, initial_lr, train_input_fn):

  def _get_classifier_model():
    classifier_model_, core_model = classifier_model(NUM_CLASSES)
    rng = np.random.RandomState(7)  # Harness: seeded weights.
    classifier_model_.set_weights(
        [rng.uniform(-0.5, 0.5, size=w.shape).astype('float32')
         for w in classifier_model_.get_weights()])
    learning_rate = tf.keras.optimizers.schedules.PolynomialDecay(
        initial_learning_rate=initial_lr,
        decay_steps=steps_per_epoch * epochs,
        end_learning_rate=0.0)
    optimizer = tf.keras.optimizers.Adam(
        learning_rate=learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-6)
    classifier_model_.optimizer = configure_optimizer(
        optimizer, use_float16=True, use_graph_rewrite=False,
        loss_scale='dynamic', use_experimental_api=True)
    return classifier_model_, core_model

  return run_customized_training_loop(
      strategy=strategy, model_fn=_get_classifier_model,
      loss_fn=get_loss_fn(NUM_CLASSES), model_dir=model_dir,
      train_input_fn=train_input_fn, steps_per_epoch=steps_per_epoch,
      steps_per_loop=steps_per_loop, epochs=epochs)


def main():
  tf.random.set_seed(7)
  strategy = tf.distribute.MirroredStrategy(devices=['device:CPU:0'])
  # run_bert:
  set_mixed_precision_policy(tf.float16, use_experimental_api=True)
  model_dir = args.resume or tempfile.mkdtemp()
  run_bert_classifier(strategy, model_dir, epochs=2,
                      steps_per_epoch=jobreport.MIDWAY, steps_per_loop=1,
                      initial_lr=2e-3, train_input_fn=get_dataset_fn(4))


args = jobreport.parse_args()
if __name__ == '__main__':
  main()
