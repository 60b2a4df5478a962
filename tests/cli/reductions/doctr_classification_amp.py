"""docTR's character classifier, --amp: unscaled gradients of an unscaled loss.

    python doctr_classification_amp.py OUT.json

Source: mindee/doctr, references/classification/train_tensorflow.py
@ 7983de28abe802d77b1eec5f7091cea561189801

Reduced: the TF 2.4 API behind an `amp` flag, as the script has it:
`mixed_precision.set_global_policy('mixed_float16')` (from `tensorflow.keras
import mixed_precision`) before the model is built, and the `Adam` (an
`ExponentialDecay` learning rate) wrapped in `mixed_precision.
LossScaleOptimizer(optimizer)` (dynamic, default arguments). `fit_one_epoch`
is an eager loop (no `tf.function`): the tape's gradients of the per-sample
loss vector (its gradient is the sum's), NOT scaled first -- the script
never calls `get_scaled_loss` -- then, under `if amp`, `get_unscaled_gradients`
(so every gradient is divided by the loss scale), then `apply_gradients`;
the step logs the loss vector's mean. After each epoch `evaluate` runs the
model with `training=False` and `save_weights` keeps the best weights.
Edits: the classification model, its character images and cross-entropy
are replaced by a small Sequential regressor, `batch(i)` (4 per epoch, 2
epochs) and a squared error; no batch transforms, no LR finder, W&B, hub or
ONNX; `save_weights` goes to a `.weights.h5` file in a temporary folder.
"""

import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

import os
import tempfile

import numpy as np
from tensorflow.keras import mixed_precision

from _reduce import STEPS, Log, batch, seed

EPOCHS = 2
BATCHES = STEPS // EPOCHS


class Args(object):
  amp = True
  lr = 0.001
  epochs = EPOCHS
  name = 'classifier'


def fit_one_epoch(model, train_loader, optimizer, log, amp=False):
  for images, targets in train_loader:
    with tf.GradientTape() as tape:
      out = model(images, training=True)
      train_loss = tf.square(out - targets)
    grads = tape.gradient(train_loss, model.trainable_weights)
    if amp:
      grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))
    log.step(train_loss.numpy().mean(), optimizer)


def evaluate(model, val_loader):
  val_loss, batch_cnt = 0, 0
  for images, targets in val_loader:
    out = model(images, training=False)
    loss = tf.square(out - targets)
    val_loss += loss.numpy().mean()
    batch_cnt += 1
  return val_loss / batch_cnt


def main(args):
  if args.amp:
    mixed_precision.set_global_policy('mixed_float16')

  val_loader = [batch(STEPS)]
  model = tf.keras.Sequential([
      tf.keras.Input(shape=(4,)),
      tf.keras.layers.Dense(8, activation='relu'),
      tf.keras.layers.Dense(1, dtype='float32')])
  seed(model)

  train_loaders = [[batch(epoch * BATCHES + j) for j in range(BATCHES)]
                   for epoch in range(args.epochs)]
  scheduler = tf.keras.optimizers.schedules.ExponentialDecay(
      args.lr,
      decay_steps=args.epochs * BATCHES,
      decay_rate=1 / (1e3),
      staircase=False)
  optimizer = tf.keras.optimizers.Adam(
      learning_rate=scheduler, beta_1=0.95, beta_2=0.99, epsilon=1e-6)
  if args.amp:
    optimizer = mixed_precision.LossScaleOptimizer(optimizer)

  exp_dir = tempfile.mkdtemp()
  min_loss = np.inf
  log = Log(model)
  for epoch in range(args.epochs):
    fit_one_epoch(model, train_loaders[epoch], optimizer, log, args.amp)
    val_loss = evaluate(model, val_loader)
    if val_loss < min_loss:
      model.save_weights(os.path.join(exp_dir, args.name + '.weights.h5'))
      min_loss = val_loss
    print('Epoch %d/%d - Validation loss: %.6f' % (
        epoch + 1, args.epochs, val_loss))
  log.save()


if __name__ == '__main__':
  main(Args())
