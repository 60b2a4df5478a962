"""TF 2.3 job: a printed-only policy, slots made before a restore, a resume.

    python tf23_slots_then_restore.py OUT.json

TF's r2.3 guide builds `Policy('mixed_float16', loss_scale=1024)` only to
print its loss scale; the RetinaNet trainer (tests/public_jobs/
retinanet_trainer.py) creates the optimizer's slots with
`_create_all_weights` before the restore that fills them. The job trains,
saves with a `tf.train.Checkpoint`, builds a fresh model and optimizer,
creates their slots, restores, and trains on.
"""

import os
import sys
import tempfile

import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import
from tensorflow.keras.mixed_precision import experimental as mixed_precision

from _data import batch, make_model, save

policy = mixed_precision.Policy('mixed_float16')
mixed_precision.set_policy(policy)
print('Loss scale: %s' % policy.loss_scale)
new_policy = mixed_precision.Policy('mixed_float16', loss_scale=1024)
print(new_policy.loss_scale)


def make():
  model = make_model()
  optimizer = mixed_precision.LossScaleOptimizer(
      tf.keras.optimizers.SGD(0.01, momentum=0.5), loss_scale='dynamic')
  return model, optimizer


def train(model, optimizer, steps, history):
  @tf.function
  def step(x, y):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(model(x) - y))
      scaled_loss = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(
        tape.gradient(scaled_loss, model.trainable_variables))
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  for i in steps:
    loss = step(*batch(i))
    history.append({'loss': float(loss),
                    'loss_scale': float(optimizer.loss_scale)})


history = []
model, optimizer = make()
train(model, optimizer, range(6), history)
path = tf.train.Checkpoint(model=model, optimizer=optimizer).write(
    os.path.join(tempfile.mkdtemp(), 'ckpt'))

model, optimizer = make()
optimizer._create_all_weights(model.trainable_variables)  # pylint: disable=protected-access
status = tf.train.Checkpoint(model=model, optimizer=optimizer).read(path)
status.assert_consumed()
train(model, optimizer, range(6, 12), history)
save(sys.argv[1], history=history,
     weights=[w.tolist() for w in model.get_weights()])
