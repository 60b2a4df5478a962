"""TensorFlowTTS's Seq2Seq trainer: tf.gradients of a scaled loss in strategy.run, resumed.

    python tensorflowtts_base_trainer.py OUT.json

Source: TensorSpeech/TensorFlowTTS, tensorflow_tts/trainers/base_trainer.py
@ cca12a3843dd3b4d5dc2608714f76d2d0d4c4255

Reduced: the trainer object (`Seq2SeqBasedTrainer`) wraps the optimizer it is
given in TF 2.3's `experimental.LossScaleOptimizer(opt, "dynamic")` when its
`is_mixed_precision` flag is on (the job's scripts also set the experimental
`mixed_float16` policy then). Its one-step function, a `tf.function` with an
input signature taken from the distributed dataset's element spec, runs the
per-replica step in `strategy.run` (a `OneDeviceStrategy` on the CPU, what
the job picks without GPUs): the per-example losses are averaged with
`tf.nn.compute_average_loss` over the global batch, the loss is scaled with
`get_scaled_loss`, gradients come from `tf.gradients` (not a tape), are
unscaled with `get_unscaled_gradients` and applied with
`apply_gradients(zip(...), 1.0)`. That 1.0 is the wrapper's positional
`name`, which TF's wrapper hands on positionally to the inner optimizer: the
job's `AdamWeightDecay` (an Adam subclass, tensorflow_tts/optimizers/
adamweightdecay.py at that commit, weight decay 0 here) takes it as
`clip_norm` and clips the unscaled gradients to global norm 1.0 (after the
wrapper's finiteness check) before Adam applies them. The replica losses are
SUM-reduced.
`gradient_accumulation_steps` is 1 (the job's default path). Midway the
trainer saves its `tf.train.Checkpoint(steps, epochs, optimizer)` (the model
is not in it; its weights go to a separate weights file) and a fresh trainer,
model and optimizer load it, re-assign `optimizer.iterations` from the
restored step count, load the weights and train on.
Edits for Keras 3: `.weights.h5` for the weights file; no metrics, tqdm or
summaries.
"""

import os
import tempfile

import numpy as np
import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

from _reduce import STEPS, Log, batch, seed

CONFIG = {'batch_size': 8, 'gradient_accumulation_steps': 1,
          'var_train_expr': None, 'is_mixed_precision': True}
SAVE_AT = 4


class Seq2SeqTrainer(object):
  """The job's trainer object, kept to the path the data flow takes."""

  def __init__(self, steps, epochs, config, strategy, is_mixed_precision):
    self.steps = steps
    self.epochs = epochs
    self.config = config
    self._strategy = strategy
    self._is_mixed_precision = is_mixed_precision
    self._model = None
    self._optimizer = None
    self._trainable_variables = None
    self._signature_applied = False

  def set_optimizer(self, optimizer):
    self._optimizer = optimizer
    if self._is_mixed_precision:
      self._optimizer = (
          tf.keras.mixed_precision.experimental.LossScaleOptimizer(
              self._optimizer, 'dynamic'))

  def get_optimizer(self):
    return self._optimizer

  def get_n_gpus(self):
    return self._strategy.num_replicas_in_sync

  def compile(self, model, optimizer):
    self._model = model
    self.set_optimizer(optimizer)
    self._trainable_variables = self._train_vars()

  def _train_vars(self):
    if self.config['var_train_expr']:
      wanted = self.config['var_train_expr'].split('|')
      return [v for v in self._model.trainable_variables
              if any(w in v.name for w in wanted)]
    return self._model.trainable_variables

  def compute_per_example_losses(self, batch_, outputs):
    per_example = tf.reduce_mean(tf.square(outputs - batch_['y']), axis=-1)
    return per_example, {}

  def _calculate_gradient_per_batch(self, batch_):
    outputs = self._model(batch_['x'], training=True)
    per_example, _ = self.compute_per_example_losses(batch_, outputs)
    replica_loss = tf.nn.compute_average_loss(
        per_example,
        global_batch_size=self.config['batch_size'] * self.get_n_gpus()
        * self.config['gradient_accumulation_steps'])
    if self._is_mixed_precision:
      scaled = self._optimizer.get_scaled_loss(replica_loss)
      grads = tf.gradients(scaled, self._trainable_variables)
      grads = self._optimizer.get_unscaled_gradients(grads)
    else:
      grads = tf.gradients(replica_loss, self._trainable_variables)
    return grads, replica_loss

  def _one_step_forward_per_replica(self, batch_):
    grads, replica_loss = self._calculate_gradient_per_batch(batch_)
    self._optimizer.apply_gradients(
        zip(grads, self._trainable_variables), 1.0)
    return replica_loss

  def _one_step_forward(self, batch_):
    losses = self._strategy.run(self._one_step_forward_per_replica,
                                args=(batch_,))
    return self._strategy.reduce(tf.distribute.ReduceOp.SUM, losses,
                                 axis=None)

  def train_step(self, batch_, element_spec):
    if not self._signature_applied:
      self.one_step_forward = tf.function(self._one_step_forward,
                                          input_signature=[element_spec])
      self._signature_applied = True
    loss = self.one_step_forward(batch_)
    self.steps += 1
    return loss

  def create_checkpoint_manager(self, saved_path):
    self.saved_path = saved_path
    self.ckpt = tf.train.Checkpoint(steps=tf.Variable(1),
                                    epochs=tf.Variable(1),
                                    optimizer=self.get_optimizer())
    self.ckp_manager = tf.train.CheckpointManager(self.ckpt, saved_path,
                                                  max_to_keep=10)

  def _weights_file(self):
    return os.path.join(self.saved_path,
                        'model-{}.weights.h5'.format(self.steps))

  def save_checkpoint(self):
    self.ckpt.steps.assign(self.steps)
    self.ckpt.epochs.assign(self.epochs)
    self.ckp_manager.save(checkpoint_number=self.steps)
    self._model.save_weights(self._weights_file())

  def load_checkpoint(self, path):
    self.ckpt.restore(path)
    self.steps = int(self.ckpt.steps.numpy())
    self.epochs = int(self.ckpt.epochs.numpy())
    self._optimizer = self.ckpt.optimizer
    self._optimizer.iterations.assign(tf.cast(self.steps, tf.int64))
    self._model.load_weights(self._weights_file())


class AdamWeightDecay(tf.keras.optimizers.Adam):
  """The job's Adam: clips by global norm in `apply_gradients`."""

  def apply_gradients(self, grads_and_vars, clip_norm=0.5, **kwargs):
    grads, tvars = list(zip(*grads_and_vars))
    grads, _ = tf.clip_by_global_norm(grads, clip_norm=clip_norm)
    return super(AdamWeightDecay, self).apply_gradients(zip(grads, tvars),
                                                        **kwargs)


def build_model():
  model = tf.keras.Sequential([
      tf.keras.Input(shape=(4,)),
      tf.keras.layers.Dense(8, activation='relu'),
      tf.keras.layers.Dense(1, dtype='float32')])
  seed(model)
  return model


def new_trainer(strategy, saved_path):
  trainer = Seq2SeqTrainer(0, 0, CONFIG, strategy,
                           is_mixed_precision=CONFIG['is_mixed_precision'])
  with strategy.scope():
    trainer.compile(build_model(), AdamWeightDecay(0.01))
    trainer.create_checkpoint_manager(saved_path)
  return trainer


if CONFIG['is_mixed_precision']:
  tf.keras.mixed_precision.experimental.set_policy(
      tf.keras.mixed_precision.experimental.Policy('mixed_float16'))
strategy = tf.distribute.OneDeviceStrategy(device='/cpu:0')
batches = [batch(i) for i in range(STEPS)]
data = tf.data.Dataset.from_tensor_slices(
    {'x': np.stack([b[0] for b in batches]),
     'y': np.stack([b[1] for b in batches])})
saved_path = tempfile.mkdtemp()

trainer = new_trainer(strategy, saved_path)
log = Log(trainer._model)  # pylint: disable=protected-access
dist = strategy.experimental_distribute_dataset(data.take(SAVE_AT))
for element in dist:
  loss = trainer.train_step(element, dist.element_spec)
  log.step(loss, trainer.get_optimizer())
trainer.save_checkpoint()

# Resume: fresh objects, restored from the checkpoint written above.
trainer = new_trainer(strategy, saved_path)
with strategy.scope():
  trainer.load_checkpoint(trainer.ckp_manager.latest_checkpoint)
log.model = trainer._model  # pylint: disable=protected-access
dist = strategy.experimental_distribute_dataset(data.skip(SAVE_AT))
for element in dist:
  loss = trainer.train_step(element, dist.element_spec)
  log.step(loss, trainer.get_optimizer())
log.save()
