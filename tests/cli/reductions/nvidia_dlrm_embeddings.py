"""NVIDIA's DLRM: a flag's fixed loss scale, sparse embedding gradients, 2 applies.

    python nvidia_dlrm_embeddings.py OUT.json

Source: NVIDIA/DeepLearningExamples, TensorFlow2/Recommendation/DLRM/main.py
and model.py @ ff6f7c6532e50f0d6b7268b3e3ee66083dd260c7

Reduced: with `--amp`, `init_tf` sets an experimental `Policy('mixed_float16',
loss_scale=FLAGS.loss_scale)` (TF 2.3's API, still in TF 2.4) while `main`
wraps SGD in TF 2.4's `LossScaleOptimizer(..., initial_scale=FLAGS.loss_scale,
dynamic=False)` (imported `from tensorflow.keras.mixed_precision`): a FIXED
scale of 1024 from a flag. With `--optimizer=sgd` the embedding and MLP
optimizers are the same object. `DlrmTrainer.train_step` (a `tf.function`
method) first runs the learning-rate scheduler (it assigns the wrapper's
`learning_rate`), scales the mean binary cross-entropy, takes gradients
(the embedding tables' are `IndexedSlices`, never densified), unscales them
all, then applies the bottom part (embeddings and bottom MLP) and the top
MLP in TWO `apply_gradients` calls on that one wrapper, so `iterations`
grows by two per step. The float32 head sits at the end of the top MLP.
A fixed scale applies non-finite gradients, so the overflowing batch is
left out of the data (the loop runs over every batch but OVERFLOW): no step
is skipped.
Edits: absl flags are a plain object; variables are split into bottom and
top by layer, not by the "bottom_model" name scope (Keras 3 variable names
carry no name scope); the model's `call` is not itself a `tf.function`; the
scheduler warms up from step 1 (the job's starts at a learning rate of 0,
which would look like a skipped step); `optimizer.lr` is `learning_rate`
(Keras 3 has no `lr`); `momentum=0.0`, not `0` (Keras 3 wants a
float); where the optimizer has `build` (Keras 3) it is built on all the
model's variables first (Keras 3 refuses a second `apply_gradients` on
variables it was not built with; Keras 2 has no `build`). Left out: Horovod (world size 1: no gradient
rescaling or all-reduce), the padding weights, the dot-interaction kernel
(plain pairwise dot products), evaluation and checkpoints.
"""

import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import
from tensorflow.keras.mixed_precision import LossScaleOptimizer

from _reduce import OVERFLOW, STEPS, Log, batch, seed


class FLAGS(object):
  amp = True
  loss_scale = 1024
  optimizer = 'sgd'
  learning_rate = 0.1
  warmup_steps = 2
  embedding_dim = 4
  table_sizes = (10, 10)


def init_tf(flags):
  if flags.amp:
    policy = tf.keras.mixed_precision.experimental.Policy(
        'mixed_float16', loss_scale=flags.loss_scale)
    tf.keras.mixed_precision.experimental.set_policy(policy)


class LearningRateScheduler(object):
  """Linear warm-up to `base_lr`, assigned to each optimizer every step."""

  def __init__(self, optimizers, base_lr, warmup_steps):
    self.optimizers = optimizers
    self.base_lr = base_lr
    self.warmup_steps = warmup_steps
    self.step = tf.Variable(0)

  @tf.function
  def __call__(self):
    factor = tf.minimum(
        1.0, tf.cast(self.step + 1, tf.float32) / float(self.warmup_steps))
    for optimizer in self.optimizers:
      optimizer.learning_rate.assign(self.base_lr * factor)
    self.step.assign(self.step + 1)


class Dlrm(tf.keras.Model):
  """A bottom MLP and embedding tables, pairwise dots, a top MLP."""

  def __init__(self, flags):
    super(Dlrm, self).__init__()
    self.amp = flags.amp
    self.bottom_mlp = [tf.keras.layers.Dense(flags.embedding_dim,
                                             activation='relu')]
    self.embedding_layers = [
        tf.keras.layers.Embedding(size, flags.embedding_dim)
        for size in flags.table_sizes]
    self.top_mlp = [tf.keras.layers.Dense(8, activation='relu'),
                    tf.keras.layers.Dense(1, dtype='float32')]

  def call(self, inputs):
    numerical_features, cat_features = inputs
    embedding_outputs = [
        layer(tf.cast(cat_features[:, i], tf.int32))
        for i, layer in enumerate(self.embedding_layers)]
    if self.amp:
      numerical_features = tf.cast(numerical_features, tf.float16)
      embedding_outputs = [tf.cast(e, tf.float16) for e in embedding_outputs]
    x = numerical_features
    for layer in self.bottom_mlp:
      x = layer(x)
    vectors = [x] + embedding_outputs
    dots = [tf.reduce_sum(vectors[i] * vectors[j], axis=1, keepdims=True)
            for i in range(len(vectors)) for j in range(i)]
    x = tf.concat([x] + dots, axis=1)
    for layer in self.top_mlp:
      x = layer(x)
    return tf.cast(x, tf.float32)

  @property
  def bottom_variables(self):
    return [v for layer in self.embedding_layers + self.bottom_mlp
            for v in layer.trainable_weights]

  @property
  def top_variables(self):
    return [v for layer in self.top_mlp for v in layer.trainable_weights]


class DlrmTrainer(object):

  def __init__(self, dlrm, embedding_optimizer, mlp_optimizer, amp,
               lr_scheduler):
    self.dlrm = dlrm
    self.embedding_optimizer = embedding_optimizer
    self.mlp_optimizer = mlp_optimizer
    self.amp = amp
    self.lr_scheduler = lr_scheduler
    self.bce = tf.keras.losses.BinaryCrossentropy(
        reduction=tf.keras.losses.Reduction.NONE, from_logits=True)

  def _split(self, gradients):
    ids = [id(v) for v in self.dlrm.trainable_variables]
    by_var = dict(zip(ids, gradients))
    return ([by_var[id(v)] for v in self.dlrm.bottom_variables],
            [by_var[id(v)] for v in self.dlrm.top_variables])

  @tf.function
  def train_step(self, numerical_features, categorical_features, labels):
    self.lr_scheduler()
    with tf.GradientTape() as tape:
      predictions = self.dlrm((numerical_features, categorical_features),
                              training=True)
      unscaled_loss = tf.math.reduce_mean(self.bce(labels, predictions))
      scaled_loss = (self.mlp_optimizer.get_scaled_loss(unscaled_loss)
                     if self.amp else unscaled_loss)
    scaled_gradients = tape.gradient(scaled_loss,
                                     self.dlrm.trainable_variables)
    if self.amp:
      unscaled_gradients = self.mlp_optimizer.get_unscaled_gradients(
          scaled_gradients)
    else:
      unscaled_gradients = scaled_gradients
    bottom_gradients, top_gradients = self._split(unscaled_gradients)
    self.mlp_optimizer.apply_gradients(
        zip(bottom_gradients, self.dlrm.bottom_variables))
    self.mlp_optimizer.apply_gradients(
        zip(top_gradients, self.dlrm.top_variables))
    return unscaled_loss


def features(i):
  x, y = batch(i)
  ids = (abs(x) * 3).astype('int32') % 10
  labels = (y > 0).astype('float32')
  return x, ids, labels


init_tf(FLAGS)
dlrm = Dlrm(FLAGS)
first = features(0)
dlrm((first[0], first[1]))
seed(dlrm)

embedding_optimizer = tf.keras.optimizers.SGD(
    learning_rate=FLAGS.learning_rate, momentum=0.0)
if FLAGS.amp:
  embedding_optimizer = LossScaleOptimizer(
      embedding_optimizer, initial_scale=FLAGS.loss_scale, dynamic=False)
mlp_optimizer = embedding_optimizer
if hasattr(mlp_optimizer, 'build'):  # Keras 3: one optimizer, two var lists.
  mlp_optimizer.build(dlrm.trainable_variables)
scheduler = LearningRateScheduler([mlp_optimizer], FLAGS.learning_rate,
                                  FLAGS.warmup_steps)
trainer = DlrmTrainer(dlrm, embedding_optimizer=embedding_optimizer,
                      mlp_optimizer=mlp_optimizer, amp=FLAGS.amp,
                      lr_scheduler=scheduler)

log = Log(dlrm)
for i in [i for i in range(STEPS + 1) if i != OVERFLOW]:
  loss = trainer.train_step(*features(i))
  log.step(loss, mlp_optimizer)
log.save()
