"""A TF 2.3 job keeping its model and optimizer on a trainer object.

    python tf23_trainer_job.py CHECKPOINT_DIR STEPS OUT.json

TF 2.3 code as its authors wrote it, plus the install line: a policy that
carries its loss scale (`Policy('mixed_float16', loss_scale='dynamic')`),
the experimental LossScaleOptimizer given `policy.loss_scale`, model and
optimizer held by a `tf.Module` trainer, `step` and `epoch` variables beside
it at the checkpoint's root, a CheckpointManager. It restores the latest
checkpoint if there is one, trains STEPS more steps (the third of them on a
corrupted batch, which overflows), saves, and writes each step's loss, loss
scale and iterations, the final weights, step and epoch to OUT.json.

tests/fixtures/convert/trainer_tf23 is this job's first 12 steps, run by
TF 2.3.4 (tools/gen_convert_fixtures.py, with the install line a no-op).
"""

import json
import sys

import numpy as np
import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import
from tensorflow.keras.mixed_precision import experimental as mixed_precision

from job_model import make_model

checkpoint_dir, steps, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]

# The job's data: 192 rows, 6 batches of 32 per epoch, in order.
BATCH, BATCHES_PER_EPOCH = 32, 6
rng = np.random.RandomState(2024)
x_all = rng.normal(size=(BATCH * BATCHES_PER_EPOCH, 6)).astype('float32')
w_true = rng.normal(size=(6, 1)).astype('float32')
y_all = (0.5 * (x_all @ w_true)).astype('float32')

policy = mixed_precision.Policy('mixed_float16', loss_scale='dynamic')
mixed_precision.set_policy(policy)


class Trainer(tf.Module):
  """Holds what the job trains, as many TF 2.x jobs did."""

  def __init__(self):
    super().__init__(name='trainer')
    self.model = make_model()
    self.optimizer = mixed_precision.LossScaleOptimizer(
        tf.keras.optimizers.Adam(learning_rate=0.003), policy.loss_scale)

  @tf.function
  def train_step(self, x, y):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(self.model(x, training=True) - y))
      scaled_loss = self.optimizer.get_scaled_loss(loss)
    variables = self.model.trainable_variables
    scaled_gradients = tape.gradient(scaled_loss, variables)
    gradients = self.optimizer.get_unscaled_gradients(scaled_gradients)
    self.optimizer.apply_gradients(zip(gradients, variables))
    return loss


trainer = Trainer()
step = tf.Variable(0, dtype=tf.int64)
epoch = tf.Variable(0, dtype=tf.int64)
checkpoint = tf.train.Checkpoint(trainer=trainer, step=step, epoch=epoch)
manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=2)
checkpoint.restore(manager.latest_checkpoint)

history = []
start = int(step.numpy())
for _ in range(steps):
  step.assign_add(1)
  s = int(step.numpy())
  first = (s - 1) % BATCHES_PER_EPOCH * BATCH
  y = y_all[first:first + BATCH] * (1000. if s == start + 3 else 1.)
  loss = trainer.train_step(tf.constant(x_all[first:first + BATCH]),
                            tf.constant(y))
  epoch.assign(s // BATCHES_PER_EPOCH)
  history.append({'loss': float(loss),
                  'loss_scale': float(trainer.optimizer.loss_scale()),
                  'iterations': int(trainer.optimizer.iterations.numpy())})
manager.save()
with open(out_path, 'w') as f:
  json.dump({'history': history,
             'weights': [w.numpy().tolist() for w in trainer.model.weights],
             'step': int(step.numpy()), 'epoch': int(epoch.numpy())}, f)
