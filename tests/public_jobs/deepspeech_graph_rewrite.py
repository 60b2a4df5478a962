"""Mozilla DeepSpeech's training graph: tf.compat.v1 with the graph rewrite.

Original: mozilla/DeepSpeech, training/deepspeech_training/train.py, commit
0030cab22078592134ce9950c8e6fb603af0679b (`train`, `get_tower_results`,
`average_gradients`, `create_optimizer`, `load_or_init_graph_for_training`).

Calls kept in the original's order (`tfv1` is `tf.compat.v1`):
`tfv1.data.Iterator.from_structure(tfv1.data.get_output_types(set),
tfv1.data.get_output_shapes(set), output_classes=...)` and
`make_initializer`; dropout `tfv1.placeholder`s fed per run; a
`tfv1.get_variable('learning_rate', trainable=False)`;
`tfv1.train.AdamOptimizer(learning_rate=..., beta1=, beta2=, epsilon=)`;
`tfv1.train.experimental.enable_mixed_precision_graph_rewrite(optimizer)`
(the `--automatic_mixed_precision` path); per tower
`optimizer.compute_gradients(avg_loss)` under `tf.device` and
`tfv1.variable_scope`, averaged as `average_gradients` does;
`tfv1.train.get_or_create_global_step()`;
`optimizer.apply_gradients(avg_tower_gradients, global_step=global_step)`;
`tfv1.train.Saver(max_to_keep=...)`; `tfv1.Session`,
`get_default_graph().finalize()`, the batch loop's `session.run([train_op,
global_step, loss], feed_dict=...)` until `OutOfRangeError`,
`checkpoint_saver.save(session, checkpoint_path, global_step=...)`; resume
as `tfv1.train.get_checkpoint_state(dir)` and `Saver.restore`.

Shrunk: the DeepSpeech RNN and CTC loss replaced by one dense layer and a
mean squared error (`tfv1.get_variable` weights), the audio features by
seeded synthetic batches (4 x 6 features), one tower on the CPU, 10 steps
in two "epochs" of 5 with a checkpoint after the first (as the original
saves after each epoch); no summaries, dev sets or progress bars. DeepSpeech
ran on TF 1.15, where graph mode is the default; on TF 2.x the job calls
`tfv1.disable_v2_behavior()` first. Non-finite steps: the features of
the batches at steps 2 and 6 hold an inf. Needs no Keras: it runs the same
with Keras 3 and tf_keras.
"""

import os
import sys

import numpy as np
import tensorflow as tf
import tensorflow.compat.v1 as tfv1

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jobreport  # pylint: disable=g-import-not-at-top,wrong-import-position

POISONED = (2, 6)
BATCH = 4


def create_dataset(epoch, rng_seed=5):
  rng = np.random.RandomState(rng_seed)
  n = BATCH * jobreport.STEPS
  features = rng.normal(size=(n, 6)).astype('float32')
  labels = rng.normal(size=(n, 1)).astype('float32')
  for step in POISONED:
    features[step * BATCH, 0] = np.inf
  half = jobreport.MIDWAY * BATCH
  part = slice(0, half) if epoch == 0 else slice(half, n)
  return tf.data.Dataset.from_tensor_slices(
      (features[part], labels[part])).batch(BATCH)


def create_optimizer(learning_rate_var):
  return tfv1.train.AdamOptimizer(learning_rate=learning_rate_var,
                                  beta1=0.9, beta2=0.999, epsilon=1e-08)


def calculate_mean_edit_distance_and_loss(iterator, dropout_rates,
                                          reuse=False):
  features, labels = iterator.get_next()
  with tfv1.variable_scope('layer_1', reuse=reuse):
    init = tfv1.constant_initializer(
        np.random.RandomState(9).uniform(-0.5, 0.5, size=(6, 1)))
    weights = tfv1.get_variable('weights', shape=(6, 1), initializer=init)
    bias = tfv1.get_variable('bias', shape=(1,),
                             initializer=tfv1.zeros_initializer())
  hidden = tf.nn.dropout(features, rate=dropout_rates[0])
  logits = tf.matmul(hidden, weights) + bias
  return tf.reduce_mean(tf.square(logits - labels))


def get_tower_results(iterator, optimizer, dropout_rates):
  tower_avg_losses = []
  tower_gradients = []
  with tfv1.variable_scope(tfv1.get_variable_scope()):
    for i, device in enumerate(['/cpu:0']):
      with tf.device(device):
        with tf.name_scope('tower_%d' % i):
          avg_loss = calculate_mean_edit_distance_and_loss(
              iterator, dropout_rates, reuse=i > 0)
          tfv1.get_variable_scope().reuse_variables()
          tower_avg_losses.append(avg_loss)
          gradients = optimizer.compute_gradients(avg_loss)
          tower_gradients.append(gradients)
  avg_loss_across_towers = tf.reduce_mean(input_tensor=tower_avg_losses,
                                          axis=0)
  return tower_gradients, avg_loss_across_towers


def average_gradients(tower_gradients):
  average_grads = []
  with tf.device('/cpu:0'):
    for grad_and_vars in zip(*tower_gradients):
      grads = []
      for g, _ in grad_and_vars:
        grads.append(tf.expand_dims(g, 0))
      grad = tf.concat(grads, 0)
      grad = tf.reduce_mean(input_tensor=grad, axis=0)
      average_grads.append((grad, grad_and_vars[0][1]))
  return average_grads


def loss_scale_state(optimizer, session):
  """Harness: the wrapped optimizer's loss scale and counter."""
  loss_scale = optimizer._loss_scale  # pylint: disable=protected-access
  counter = getattr(loss_scale, '_num_good_steps', None)
  scale = session.run(loss_scale())
  return scale, None if counter is None else session.run(counter)


def train(args):
  train_sets = [create_dataset(0), create_dataset(1)]
  iterator = tfv1.data.Iterator.from_structure(
      tfv1.data.get_output_types(train_sets[0]),
      tfv1.data.get_output_shapes(train_sets[0]),
      output_classes=tfv1.data.get_output_classes(train_sets[0]))
  train_init_ops = [iterator.make_initializer(s) for s in train_sets]

  dropout_rates = [tfv1.placeholder(tf.float32, name='dropout_{}'.format(i))
                   for i in range(6)]
  dropout_feed_dict = {rate: 0. for rate in dropout_rates}

  learning_rate_var = tfv1.get_variable('learning_rate', initializer=0.001,
                                        trainable=False)
  optimizer = create_optimizer(learning_rate_var)
  optimizer = tfv1.train.experimental.enable_mixed_precision_graph_rewrite(
      optimizer)

  gradients, loss = get_tower_results(iterator, optimizer, dropout_rates)
  avg_tower_gradients = average_gradients(gradients)
  global_step = tfv1.train.get_or_create_global_step()
  apply_gradient_op = optimizer.apply_gradients(avg_tower_gradients,
                                                global_step=global_step)

  checkpoint_saver = tfv1.train.Saver(max_to_keep=5)
  save_dir = args.out or '/tmp/deepspeech_job'
  checkpoint_path = os.path.join(save_dir, 'train')
  train_vars = tfv1.trainable_variables()
  # Harness: building the state reads before finalize().
  loss_scale = optimizer._loss_scale  # pylint: disable=protected-access
  scale_t = loss_scale()
  counter_t = getattr(loss_scale, '_num_good_steps', None)
  init_op = tfv1.global_variables_initializer()

  with tfv1.Session() as session:
    tfv1.get_default_graph().finalize()
    first_epoch, step = 0, 0
    if args.resume:
      ckpt = tfv1.train.get_checkpoint_state(args.resume, 'checkpoint')
      checkpoint_saver.restore(session, ckpt.model_checkpoint_path)
      first_epoch, step = 1, jobreport.MIDWAY
    else:
      session.run(init_op)

    for epoch in range(first_epoch, 2):
      session.run(train_init_ops[epoch])
      while True:
        before = session.run(train_vars)
        try:
          _, current_step, _ = session.run(
              [apply_gradient_op, global_step, loss],
              feed_dict=dropout_feed_dict)
        except tf.errors.OutOfRangeError:
          break
        after = session.run(train_vars)
        scale = session.run(scale_t)
        counter = None if counter_t is None else session.run(counter_t)
        jobreport.emit(jobreport.record(
            step, scale, counter, jobreport.unchanged(before, after),
            session.run(global_step)))
        step += 1
      if args.out and epoch == 0:
        jobreport.checkpoint_event(checkpoint_saver.save(
            session, checkpoint_path, global_step=global_step))


if __name__ == '__main__':
  tfv1.disable_v2_behavior()
  train(jobreport.parse_args())
