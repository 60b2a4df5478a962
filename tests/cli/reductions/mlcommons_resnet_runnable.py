"""MLPerf's ResNet runnable: a trainer whose __init__ wraps with a flag's scale.

    python mlcommons_resnet_runnable.py OUT.json

Source: mlcommons/training, image_classification/tensorflow2/resnet_runnable.py
and tf2_common/modeling/performance.py @ 9947bdf21ee3f2488fa4b362eec2ce7deb2ec4dd

Reduced: the entry point sets the policy through performance.py's
`set_mixed_precision_policy(dtype)` (the experimental 'mixed_float16' policy,
its loss scale None). `ResnetRunnable.__init__` builds the model and the
optimizer and, for float16, wraps it itself in the experimental
`LossScaleOptimizer(optimizer, loss_scale)` with `loss_scale` from the flags
(`get_loss_scale(flags, default_for_fp16=128)`: the `--loss_scale` flag,
"dynamic" here, else a fixed 128); `self.global_step` is the inner
optimizer's `iterations`; a `tf.train.Checkpoint(model, optimizer)` holds
the wrapper. `train_step` runs, under the strategy, a `tf.function` local
step that adds the model's L2 losses, REBINDS `loss` to the scaled loss
(`dtype == 'fp16'`), unscales the gradients, returns them with that loss,
and applies them (one accumulation step); the `train_loss` metric is fed
the returned, SCALED loss, and that is what is logged. The runnable's loop
is a `tf.function` (`use_tf_function`), one step per loop. After 4 steps
the checkpoint is saved; a fresh runnable restores the model dir's latest
and trains on (a run resumed at step 4 restores it without saving first).
Edits: absl flags are a plain object; no `experimental_compile` (XLA;
renamed in later TF); the default strategy; the ResNet is two Dense layers
with L2 regularizers and a float32 softmax; metrics are not reset
(`reset_states` is not in Keras 3). Left out: gradient accumulation
(`num_accumulation_steps` 1), LARS, the controller, evaluation.
"""

import os

import numpy as np
import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

from _reduce import START, STEPS, Log, batch, model_dir, seed


class Flags(object):
  dtype = 'fp16'
  loss_scale = 'dynamic'
  batch_size = 8
  weight_decay = 1e-4
  use_tf_function = True
  num_accumulation_steps = 1


def get_tf_dtype(flags_obj):
  return {'fp16': tf.float16, 'bf16': tf.bfloat16}.get(
      flags_obj.dtype, tf.float32)


def get_loss_scale(flags_obj, default_for_fp16):
  if flags_obj.loss_scale == 'dynamic':
    return flags_obj.loss_scale
  if flags_obj.loss_scale is not None:
    return float(flags_obj.loss_scale)
  if get_tf_dtype(flags_obj) == tf.float16:
    return default_for_fp16
  return 1


def set_mixed_precision_policy(dtype, loss_scale=None):
  if dtype == tf.float16:
    policy = tf.keras.mixed_precision.experimental.Policy(
        'mixed_float16', loss_scale=loss_scale)
    tf.keras.mixed_precision.experimental.set_policy(policy)
  elif dtype == tf.float32:
    tf.keras.mixed_precision.experimental.set_policy('float32')


def resnet(weight_decay):
  regularizer = tf.keras.regularizers.l2(weight_decay)
  model = tf.keras.Sequential([
      tf.keras.Input(shape=(4,)),
      tf.keras.layers.Dense(8, activation='relu',
                            kernel_regularizer=regularizer),
      tf.keras.layers.Dense(2, kernel_regularizer=regularizer),
      tf.keras.layers.Activation('softmax', dtype='float32')])
  seed(model, seed_value=1)
  return model


class ResnetRunnable(object):

  def __init__(self, flags_obj):
    self.strategy = tf.distribute.get_strategy()
    self.flags_obj = flags_obj
    self.dtype = get_tf_dtype(flags_obj)
    self.model = resnet(flags_obj.weight_decay)
    self.optimizer = tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
    self.global_step = self.optimizer.iterations
    if self.dtype == tf.float16:
      loss_scale = get_loss_scale(flags_obj, default_for_fp16=128)
      self.optimizer = (
          tf.keras.mixed_precision.experimental.LossScaleOptimizer(
              self.optimizer, loss_scale))
    self.train_loss = tf.keras.metrics.Mean('train_loss', dtype=tf.float32)
    self.checkpoint = tf.train.Checkpoint(
        model=self.model, optimizer=self.optimizer)
    self.training_vars = self.model.trainable_variables
    self.last_loss = tf.Variable(0.0, trainable=False)
    self.train_loop_fn = self.train_step
    if flags_obj.use_tf_function:
      self.train_loop_fn = tf.function(self.train_step)

  def train_step(self, iterator):

    @tf.function
    def local_step(images, labels):
      with tf.GradientTape() as tape:
        logits = self.model(images, training=True)
        prediction_loss = tf.keras.losses.sparse_categorical_crossentropy(
            labels, logits)
        loss = tf.reduce_sum(prediction_loss) * (
            1.0 / self.flags_obj.batch_size)
        num_replicas = self.strategy.num_replicas_in_sync
        loss += tf.reduce_sum(self.model.losses) / num_replicas
        if self.flags_obj.dtype == 'fp16':
          loss = self.optimizer.get_scaled_loss(loss)
      grads = tape.gradient(loss, self.model.trainable_variables)
      if self.flags_obj.dtype == 'fp16':
        grads = self.optimizer.get_unscaled_gradients(grads)
      return logits, loss, grads

    def step_fn(inputs):
      images, labels = inputs
      _, loss, grads = local_step(images, labels)
      self.optimizer.apply_gradients(zip(grads, self.training_vars))
      self.train_loss.update_state(loss)
      self.last_loss.assign(loss)

    self.strategy.run(step_fn, args=(next(iterator),))

  def train(self, iterator):
    self.train_loop_fn(iterator)
    return self.last_loss.numpy()


def dataset(start):
  xs, ys = zip(*[batch(i) for i in range(start, STEPS)])
  labels = [(y[:, 0] > 0).astype('int32') for y in ys]
  return iter(tf.data.Dataset.from_tensor_slices(
      (np.stack(xs), np.stack(labels))))


flags_obj = Flags()
set_mixed_precision_policy(get_tf_dtype(flags_obj))
runnable = ResnetRunnable(flags_obj)
iterator = dataset(START)
log = Log(runnable.model)
directory = model_dir()
for i in range(START, STEPS):
  if i == STEPS // 2:
    if i > START:
      runnable.checkpoint.save(os.path.join(directory, 'ckpt'))
    runnable = ResnetRunnable(flags_obj)
    runnable.checkpoint.restore(tf.train.latest_checkpoint(directory))
    iterator = dataset(i)
    log.model = runnable.model
  log.step(runnable.train(iterator), runnable.optimizer)
log.save()
