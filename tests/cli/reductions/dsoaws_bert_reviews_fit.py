"""Data Science on AWS's BERT reviews job: --use_amp, MirroredStrategy, fit.

    python dsoaws_bert_reviews_fit.py OUT.json

Source: data-science-on-aws/data-science-on-aws, 08_train/src/tf_bert_reviews.py
@ 7ebcc782cc5df85bc1f67c531e2c14d36025037b

Reduced: under `tf.distribute.MirroredStrategy()` (one CPU replica here) a
`use_amp` flag turns on Grappler's rewrite
(`set_experimental_options({"auto_mixed_precision": use_amp})`; the Keras
policy lines are commented out in the script, so the model stays float32 and
on CPU nothing runs in float16) and wraps the Adam in `tf.keras.
mixed_precision.experimental.LossScaleOptimizer(optimizer, 'dynamic')`;
`compile` with the wrapped optimizer, then the first layer's `trainable`
set after compiling (`freeze_bert_layer` False), then `fit` with
`initial_epoch`, `steps_per_epoch` and the callbacks (`fit` scales and
unscales). With `enable_checkpointing` a `ModelCheckpoint` writes the
weights after every epoch; the job is then started again: the newest file
is found by its name, its epoch number becomes `initial_epoch`, the weights
go into a fresh model, a fresh wrapped Adam is built, compiled, and `fit`
goes on from that epoch. The logged loss is Keras' `logs['loss']`, the
epoch's running mean (TF 2.4 and Keras 3 alike). Edits: DistilBERT and the
TFRecord reviews are replaced by a small Sequential regressor, `batch(i)`
and a squared error (accuracy metric kept); the checkpoint saves weights
only (`save_weights_only=True`, `.weights.h5`; the script saves the whole
model but its resume reads the weights only, via `from_pretrained`); no
validation, debugger, TensorBoard or SavedModel export; the dataset is not
shuffled; 4 epochs of 2 steps, restarted after epoch 2.
"""

import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

import glob
import os
import tempfile

import numpy as np
from tensorflow.keras.callbacks import ModelCheckpoint

from _reduce import STEPS, Log, batch, seed

EPOCHS = 4
STEPS_PER_EPOCH = STEPS // EPOCHS


class Args(object):
  use_xla = False
  use_amp = True
  train_batch_size = 8
  epochs = EPOCHS
  learning_rate = 0.001
  epsilon = 0.00000001
  train_steps_per_epoch = STEPS_PER_EPOCH
  freeze_bert_layer = False
  enable_checkpointing = True


class StepLog(tf.keras.callbacks.Callback):

  def __init__(self, log):
    super(StepLog, self).__init__()
    self.log = log

  def on_train_batch_end(self, batch_index, logs=None):
    self.log.step(logs['loss'], self.model.optimizer)


def file_based_input_dataset_builder(epoch_from, batch_size):
  xs, ys = zip(*[batch(i) for i in range(epoch_from * STEPS_PER_EPOCH, STEPS)])
  dataset = tf.data.Dataset.from_tensor_slices(
      (np.concatenate(xs), np.concatenate(ys)))
  return dataset.batch(batch_size).repeat()


def build_model():
  model = tf.keras.Sequential([
      tf.keras.Input(shape=(4,)),
      tf.keras.layers.Dense(8, activation='relu'),
      tf.keras.layers.Dense(1, dtype='float32')])
  seed(model)
  return model


def load_checkpoint_model(checkpoint_path):
  list_of_checkpoint_files = glob.glob(os.path.join(checkpoint_path, '*.h5'))
  latest_checkpoint_file = max(list_of_checkpoint_files)
  initial_epoch_number = int(
      latest_checkpoint_file.rsplit('_', 1)[-1].split('.')[0])
  loaded_model = build_model()
  loaded_model.load_weights(latest_checkpoint_file)
  return loaded_model, initial_epoch_number


def train(args, checkpoint_path, log, stop_after_epoch=None):
  """One start of the job; `stop_after_epoch` stands for it being stopped."""
  distributed_strategy = tf.distribute.MirroredStrategy()
  with distributed_strategy.scope():
    tf.config.optimizer.set_jit(args.use_xla)
    tf.config.optimizer.set_experimental_options(
        {"auto_mixed_precision": args.use_amp})

    model = build_model()
    callbacks = [StepLog(log)]
    initial_epoch_number = 0

    if args.enable_checkpointing:
      os.makedirs(checkpoint_path, exist_ok=True)
      if os.listdir(checkpoint_path):
        model, initial_epoch_number = load_checkpoint_model(checkpoint_path)
      checkpoint_callback = ModelCheckpoint(
          filepath=os.path.join(checkpoint_path,
                                'tf_model_{epoch:05d}.weights.h5'),
          save_weights_only=True,
          verbose=0,
          monitor='val_accuracy')
      callbacks.append(checkpoint_callback)

    train_dataset = file_based_input_dataset_builder(
        initial_epoch_number, args.train_batch_size)

    optimizer = tf.keras.optimizers.Adam(
        learning_rate=args.learning_rate, epsilon=args.epsilon)
    if args.use_amp:
      optimizer = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
          optimizer, 'dynamic')

    loss = tf.keras.losses.MeanSquaredError()
    metric = tf.keras.metrics.SparseCategoricalAccuracy('accuracy')
    model.compile(optimizer=optimizer, loss=loss, metrics=[metric])
    model.layers[0].trainable = not args.freeze_bert_layer

    log.model = model
    model.fit(train_dataset,
              shuffle=True,
              epochs=stop_after_epoch or args.epochs,
              initial_epoch=initial_epoch_number,
              steps_per_epoch=args.train_steps_per_epoch,
              callbacks=callbacks,
              verbose=0)
  return model


checkpoint_dir = tempfile.mkdtemp()
log = Log(build_model())
train(Args(), checkpoint_dir, log, stop_after_epoch=2)  # The first start.
model = train(Args(), checkpoint_dir, log)  # Started again: resumes.
log.save()
