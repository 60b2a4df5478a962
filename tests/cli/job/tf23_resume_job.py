"""A TF 2.3 job resuming its own checkpoint (the demo job TF 2.3.4 ran).

    python tf23_resume_job.py CHECKPOINT_DIR STEPS OUT.json

TF 2.3 code as its authors wrote it, plus the install line: the
experimental policy and LossScaleOptimizer, `get_scaled_loss` /
`get_unscaled_gradients` in a GradientTape loop, a CheckpointManager. It
restores the latest checkpoint (tests/fixtures/legacy/demo_tf23: 40 steps by
TF 2.3.4), trains STEPS more on the job's data (one batch corrupted so a step
overflows), saves, and writes each step's loss, loss scale and iterations
and the final weights to OUT.json. `migrate --write` turns it into Keras 3
code that resumes the `convert`ed checkpoint.
"""

import json
import sys

import numpy as np
import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import
from tensorflow.keras.mixed_precision import experimental as mixed_precision

from job_model import make_model

checkpoint_dir, steps, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]

# The job's data: 256 rows, batches of 32 in order (see demo_tf23/job.json).
rng = np.random.RandomState(2023)
x_all = rng.normal(size=(256, 8)).astype('float32')
w_true = rng.normal(size=(8, 1)).astype('float32')
y_all = (4.0 * (x_all @ w_true)).astype('float32')

mixed_precision.set_policy('mixed_float16')
model = make_model()
optimizer = tf.keras.optimizers.SGD(learning_rate=0.002, momentum=0.9)
optimizer = mixed_precision.LossScaleOptimizer(optimizer, loss_scale='dynamic')
checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=2)
checkpoint.restore(manager.latest_checkpoint)


@tf.function
def train_step(x, y):
  with tf.GradientTape() as tape:
    loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    scaled_loss = optimizer.get_scaled_loss(loss)
  scaled_gradients = tape.gradient(scaled_loss, model.trainable_variables)
  gradients = optimizer.get_unscaled_gradients(scaled_gradients)
  optimizer.apply_gradients(zip(gradients, model.trainable_variables))
  return loss


history = []
start = int(optimizer.iterations.numpy())
for step in range(start + 1, start + steps + 1):
  rows = slice((step - 1) % 8 * 32, (step - 1) % 8 * 32 + 32)
  y = y_all[rows] * (1000. if step == start + 3 else 1.)  # a bad shard
  loss = train_step(tf.constant(x_all[rows]), tf.constant(y))
  history.append({'loss': float(loss),
                  'loss_scale': float(optimizer.loss_scale()),
                  'iterations': int(optimizer.iterations.numpy())})
manager.save()
with open(out_path, 'w') as f:
  json.dump({'history': history,
             'weights': [w.numpy().tolist() for w in model.weights]}, f)
