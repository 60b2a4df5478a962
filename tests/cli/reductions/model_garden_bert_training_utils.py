"""BERT's custom loop: an explicit float16 all-reduce, then unscale and clip.

    python model_garden_bert_training_utils.py OUT.json

Source: tensorflow/models, official/nlp/bert/model_training_utils.py (stored
at 21675df4f5e10b4f4e0581917109d0822c302036), with
official/staging/training/grad_utils.py (stored at
0cc5919e141d549d60c4d814254ac789004ac9ad) and the optimizer factory of
official/modeling/performance.py (stored at
00b830c7ca641413f37e5147cf059c89f79b0e8e).

Reduced: `configure_optimizer` wraps the optimizer in the TF 2.4
`LossScaleOptimizer(opt)` (dynamic) when float16 is on; a `model_fn` builds
the model in a 2-replica `MirroredStrategy` and sets `model.optimizer`.
`run_customized_training_loop` divides the per-replica loss by the replica
count and, with `explicit_allreduce=True`, calls
`minimize_using_explicit_allreduce`: when
`isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer)` the loss
is scaled inside the tape, the SCALED gradients are cast to float16 and summed
across replicas with `all_reduce`, cast back, unscaled with
`get_unscaled_gradients`, passed to the post-all-reduce callback (a
`clip_by_global_norm` to 1.0, as run_squad_helper.py defines it) and applied
with `apply_gradients(..., experimental_aggregate_gradients=False)`. Its other
branch (implicit all-reduce) is kept as written: it scales only for the
EXPERIMENTAL class. The loop checkpoints model, optimizer and
`global_step=optimizer.iterations` at each epoch's end; a second call builds
fresh objects, restores the latest checkpoint, reads the step to resume from
`optimizer.iterations` and trains on (its data restarting from the first
batch, as a re-made input pipeline does).
Edits for Keras 3 and the harness: the step returns the replicas' mean raw
loss instead of feeding a `Mean` metric reset with `reset_states()`; no
evaluation, summaries or callbacks; `experimental_distribute_dataset` on a
global batch of 8 (4 a replica) instead of a dataset function.
"""

import tempfile

import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

from _reduce import STEPS, Log, batch, seed, two_cpus

DEVICES = two_cpus()
USE_FLOAT16 = True


def configure_optimizer(optimizer, use_float16=False, loss_scale=None):
  if use_float16:
    if loss_scale in (None, 'dynamic'):
      optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
    else:
      optimizer = tf.keras.mixed_precision.LossScaleOptimizer(
          optimizer, dynamic=False, initial_scale=loss_scale)
  return optimizer


def clip_by_global_norm_callback(grads_and_vars):
  grads, variables = zip(*grads_and_vars)
  clipped_grads, _ = tf.clip_by_global_norm(grads, clip_norm=1.0)
  return zip(clipped_grads, variables)


def _run_callbacks(callbacks, grads_and_vars):
  for callback in callbacks:
    grads_and_vars = callback(grads_and_vars)
  return grads_and_vars


def _allreduce(grads_and_vars, allreduce_precision='float32'):
  grads, variables = zip(*[(g, v) for g, v in grads_and_vars if g is not None])
  if allreduce_precision == 'float16':
    grads = [tf.cast(grad, 'float16') for grad in grads]
  summed = tf.distribute.get_replica_context().all_reduce(
      tf.distribute.ReduceOp.SUM, grads)
  if allreduce_precision == 'float16':
    summed = [tf.cast(grad, 'float32') for grad in summed]
  return summed, variables


def minimize_using_explicit_allreduce(tape, optimizer, loss, variables,
                                      pre_allreduce_callbacks=None,
                                      post_allreduce_callbacks=None):
  if isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer):
    with tape:
      scaled_loss = optimizer.get_scaled_loss(loss)
    scaled_grads = tape.gradient(scaled_loss, variables)
    grads_and_vars = zip(scaled_grads, variables)
    if pre_allreduce_callbacks:
      grads_and_vars = _run_callbacks(pre_allreduce_callbacks, grads_and_vars)
    summed_scaled, kept = _allreduce(grads_and_vars, 'float16')
    grads_and_vars = zip(optimizer.get_unscaled_gradients(summed_scaled), kept)
  else:
    grads_and_vars = zip(tape.gradient(loss, variables), variables)
    if pre_allreduce_callbacks:
      grads_and_vars = _run_callbacks(pre_allreduce_callbacks, grads_and_vars)
    summed, kept = _allreduce(grads_and_vars, 'float32')
    grads_and_vars = zip(summed, kept)
  if post_allreduce_callbacks:
    grads_and_vars = _run_callbacks(post_allreduce_callbacks, grads_and_vars)
  optimizer.apply_gradients(
      grads_and_vars, experimental_aggregate_gradients=False)


def model_fn():
  model = tf.keras.Sequential([
      tf.keras.Input(shape=(4,)),
      tf.keras.layers.Dense(8, activation='relu'),
      tf.keras.layers.Dense(1, dtype='float32')])
  seed(model)
  model.optimizer = configure_optimizer(
      tf.keras.optimizers.SGD(0.01, momentum=0.9), use_float16=USE_FLOAT16)
  return model


def loss_fn(labels, outputs):
  return tf.reduce_mean(tf.square(tf.cast(outputs, tf.float32) - labels))


def input_fn():
  xs, ys = zip(*[batch(i) for i in range(STEPS // 2)])
  return tf.data.Dataset.from_tensor_slices(
      (tf.concat(xs, 0), tf.concat(ys, 0))).batch(8)


def run_customized_training_loop(strategy, model_dir, steps_per_epoch, epochs,
                                 log, scale_loss=True, explicit_allreduce=False,
                                 pre_allreduce_callbacks=None,
                                 post_allreduce_callbacks=None):
  total_training_steps = steps_per_epoch * epochs
  train_iterator = iter(strategy.experimental_distribute_dataset(input_fn()))
  with strategy.scope():
    model = model_fn()
    optimizer = model.optimizer
    training_vars = model.trainable_variables

    def _replicated_step(inputs):
      inputs, labels = inputs
      with tf.GradientTape() as tape:
        model_outputs = model(inputs, training=True)
        loss = loss_fn(labels, model_outputs)
        raw_loss = loss
        if scale_loss:
          loss = loss / strategy.num_replicas_in_sync
      if explicit_allreduce:
        minimize_using_explicit_allreduce(tape, optimizer, loss,
                                          training_vars,
                                          pre_allreduce_callbacks,
                                          post_allreduce_callbacks)
      else:
        if isinstance(optimizer,
                      tf.keras.mixed_precision.experimental.LossScaleOptimizer):
          with tape:
            scaled_loss = optimizer.get_scaled_loss(loss)
          scaled_grads = tape.gradient(scaled_loss, training_vars)
          grads = optimizer.get_unscaled_gradients(scaled_grads)
        else:
          grads = tape.gradient(loss, training_vars)
        optimizer.apply_gradients(zip(grads, training_vars))
      return raw_loss

    @tf.function
    def train_single_step(iterator):
      per_replica = strategy.run(_replicated_step, args=(next(iterator),))
      return strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica,
                             axis=None)

    checkpoint = tf.train.Checkpoint(
        model=model, optimizer=optimizer, global_step=optimizer.iterations)
    latest_checkpoint_file = tf.train.latest_checkpoint(model_dir)
    if latest_checkpoint_file:
      checkpoint.restore(latest_checkpoint_file)
    current_step = int(optimizer.iterations.numpy())
    log.model = model
    while current_step < total_training_steps:
      train_loss = train_single_step(train_iterator)
      current_step += 1
      log.step(train_loss, optimizer)
      if current_step % steps_per_epoch == 0:
        checkpoint.save('%s/ctl_step_%d.ckpt' % (model_dir, current_step))
  return model


mirrored = tf.distribute.MirroredStrategy(DEVICES)
directory = tempfile.mkdtemp()
with mirrored.scope():
  first = model_fn()
log = Log(first)
for run_epochs in (1, 2):  # Stopped after one epoch, then resumed.
  run_customized_training_loop(
      mirrored, directory, steps_per_epoch=STEPS // 2, epochs=run_epochs,
      log=log, explicit_allreduce=True,
      post_allreduce_callbacks=[clip_by_global_norm_callback])
log.save()
