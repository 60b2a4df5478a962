"""Model Garden's detection trainer: a bfloat16 policy and no loss scale at all.

    python model_garden_detection_base_model.py OUT.json

Source: tensorflow/models, official/vision/detection/modeling/base_model.py
(stored at 20c78a9186ff3d35612f15764262f7e3e33eeae9), with the replicated
step of official/vision/detection/executor/detection_executor.py (stored at
3b998e4f279a41d7490eb270a697b17e80e6fd38).

Reduced: the model base class sets the TF 2.3 experimental
`Policy('mixed_bfloat16')` with `set_policy` when
`params.architecture.use_bfloat16`; an `OptimizerFactory` maps the config's
optimizer type to a `functools.partial` of a Keras optimizer, called with the
learning rate by `build_optimizer()`. There is NO LossScaleOptimizer and no
`get_scaled_loss` anywhere in this job (bfloat16 needs none): the executor's
replicated step takes the mean loss plus an L2 weight decay, divides it by
the replica count, takes the gradients of the variables the frozen-prefix
filter keeps, and applies them, inside a `tf.function` run by the strategy
(one device here). The loop checkpoints model and optimizer midway; fresh
objects restore the latest checkpoint and train on (a run resumed at the
midway step starts there).
No loss scale means no skipped step: the overflow batch is left out (its
1e4-times inputs would only blow up the weights).
Edits: no `set_learning_phase`, metrics, summaries or evaluation.
"""

import functools
import re

import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

from _reduce import OVERFLOW, START, STEPS, Log, batch, model_dir, seed

PARAMS = {'architecture': {'use_bfloat16': True},
          'train': {'optimizer': {'type': 'momentum', 'momentum': 0.9},
                    'learning_rate': 0.01, 'frozen_variable_prefix': None,
                    'regularization_variable_regex': r'.*kernel',
                    'l2_weight_decay': 1e-4}}


class OptimizerFactory(object):
  """An optimizer class, configured, from the config's type."""

  def __init__(self, params):
    if params['type'] == 'momentum':
      self._optimizer = functools.partial(
          tf.keras.optimizers.SGD, momentum=params['momentum'],
          nesterov=params.get('nesterov', False))
    elif params['type'] == 'adam':
      self._optimizer = tf.keras.optimizers.Adam
    else:
      raise ValueError('Unsupported optimizer type %s.' % params['type'])

  def __call__(self, learning_rate):
    return self._optimizer(learning_rate=learning_rate)


class DetectionModel(object):
  """The model function's base: policy, optimizer factory, weight decay."""

  def __init__(self, params):
    if params['architecture']['use_bfloat16']:
      policy = tf.keras.mixed_precision.experimental.Policy('mixed_bfloat16')
      tf.keras.mixed_precision.experimental.set_policy(policy)
    train = params['train']
    self._optimizer_fn = OptimizerFactory(train['optimizer'])
    self._learning_rate = train['learning_rate']
    self._frozen_variable_prefix = train['frozen_variable_prefix']
    self._regularization_var_regex = train['regularization_variable_regex']
    self._l2_weight_decay = train['l2_weight_decay']

  def build_model(self):
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(4,)),
        tf.keras.layers.Dense(8, activation='relu'),
        tf.keras.layers.Dense(1, dtype='float32')])
    seed(model)
    model.optimizer = self.build_optimizer()
    return model

  def build_loss_fn(self):
    return lambda labels, outputs: tf.square(
        tf.cast(outputs, tf.float32) - labels)

  def build_optimizer(self):
    return self._optimizer_fn(self._learning_rate)

  def make_filter_trainable_variables_fn(self):
    prefix = self._frozen_variable_prefix

    def _filter(variables):
      return [v for v in variables
              if not prefix or not re.match(prefix, v.name)]
    return _filter

  def weight_decay_loss(self, trainable_variables):
    reg_variables = [
        v for v in trainable_variables
        if self._regularization_var_regex is None
        or re.match(self._regularization_var_regex, v.name)]
    return self._l2_weight_decay * tf.add_n(
        [tf.nn.l2_loss(v) for v in reg_variables])


def create_train_step(strategy, model, loss_fn, optimizer, variables_filter,
                      model_builder):
  trainable_variables = variables_filter(model.trainable_variables)

  def _replicated_step(inputs):
    inputs, labels = inputs
    with tf.GradientTape() as tape:
      outputs = model(inputs, training=True)
      total_loss = tf.reduce_mean(loss_fn(labels, outputs))
      total_loss += model_builder.weight_decay_loss(trainable_variables)
      per_replica_loss = total_loss / strategy.num_replicas_in_sync
    grads = tape.gradient(per_replica_loss, trainable_variables)
    optimizer.apply_gradients(zip(grads, trainable_variables))
    return total_loss

  @tf.function
  def train_step(iterator):
    per_replica = strategy.run(_replicated_step, args=(next(iterator),))
    return strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica,
                           axis=None)

  return train_step


model_builder = DetectionModel(PARAMS)
strategy = tf.distribute.OneDeviceStrategy('/cpu:0')
kept = [i for i in range(STEPS + 1) if i != OVERFLOW]
xs, ys = zip(*[batch(i) for i in kept[START:]])
dataset = tf.data.Dataset.from_tensor_slices(
    (tf.concat(xs, 0), tf.concat(ys, 0))).batch(8)
iterator = iter(strategy.experimental_distribute_dataset(dataset))
directory = model_dir()
log = None
# Half the steps, a checkpoint, fresh objects, the rest.
for part in range(START // (STEPS // 2), 2):
  with strategy.scope():
    model = model_builder.build_model()
    optimizer = model.optimizer
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    latest = tf.train.latest_checkpoint(directory)
    if latest:
      checkpoint.restore(latest)
    if log is None:
      log = Log(model)
    log.model = model
  train_step = create_train_step(
      strategy, model, model_builder.build_loss_fn(), optimizer,
      model_builder.make_filter_trainable_variables_fn(), model_builder)
  for _ in range(STEPS // 2):
    log.step(train_step(iterator), optimizer)
  checkpoint.save(directory + '/ctl_step')
log.save()
