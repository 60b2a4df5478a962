"""A TF1-style graph job (tf.compat.v1, Session, Saver) with loss scaling.

`tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer` wraps a v1
optimizer; a `Saver` checkpoints the job and a second session restores it. The
only line added for today's TensorFlow is the marked install import.
"""

import os
import tempfile

import numpy as np
import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

tf.compat.v1.disable_v2_behavior()

rng = np.random.RandomState(4)
x_data = rng.normal(size=(64, 8)).astype(np.float32)
y_data = (4. * x_data @ rng.normal(size=(8, 1))).astype(np.float32)

x = tf.compat.v1.placeholder(tf.float32, [None, 8])
y = tf.compat.v1.placeholder(tf.float32, [None, 1])
w = tf.compat.v1.get_variable('w', [8, 1],
                              initializer=tf.compat.v1.zeros_initializer())
# float16 compute, float32 master weights.
pred = tf.cast(tf.matmul(tf.cast(x, tf.float16), tf.cast(w, tf.float16)),
               tf.float32)
loss = tf.reduce_mean(tf.square(pred - y))

global_step = tf.compat.v1.train.get_or_create_global_step()
opt = tf.compat.v1.train.MomentumOptimizer(0.01, momentum=0.9)
opt = tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer(
    opt, 'dynamic')
train_op = opt.minimize(loss, global_step=global_step)
loss_scale_var = [v for v in tf.compat.v1.global_variables()
                  if 'current_loss_scale' in v.name][0]
saver = tf.compat.v1.train.Saver()

STEPS = 60
with tf.compat.v1.Session() as sess:
  sess.run(tf.compat.v1.global_variables_initializer())
  initial_scale = sess.run(loss_scale_var)
  losses = []
  for _ in range(STEPS):
    _, l = sess.run([train_op, loss], feed_dict={x: x_data, y: y_data})
    losses.append(l)
  applied, scale = sess.run([global_step, loss_scale_var])
  save_path = saver.save(sess, os.path.join(tempfile.mkdtemp(), 'model.ckpt'),
                         global_step=global_step)

print('steps run: %d, applied: %d, skipped: %d' % (
    STEPS, applied, STEPS - applied))
print('loss scale: %g -> %g' % (initial_scale, scale))
print('loss: %.4f -> %.4f' % (losses[0], losses[-1]))

with tf.compat.v1.Session() as sess:
  saver.restore(sess, save_path)
  print('restored global step: %d, loss scale: %g' % tuple(
      sess.run([global_step, loss_scale_var])))
