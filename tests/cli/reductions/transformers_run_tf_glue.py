"""transformers' TF GLUE example: USE_AMP's graph rewrite and a wrapped Adam.

    python transformers_run_tf_glue.py OUT.json

Source: huggingface/transformers, examples/run_tf_glue.py
@ 158e82e061c02fc2f1613adb7ac1d1cb6adae71c

Reduced: a module constant `USE_AMP` (True here) drives both halves of the
script's mixed precision: Grappler's rewrite through
`tf.config.optimizer.set_experimental_options({"auto_mixed_precision":
USE_AMP})` (no Keras policy: the model stays float32; the rewrite acts on a
GPU only, so on CPU nothing runs in float16), and `tf.keras.mixed_precision.
experimental.LossScaleOptimizer(opt, "dynamic")` around the Adam; then
`compile` with the wrapped optimizer, a loss picked by `num_labels` (1: mean
squared error, the regression branch) and an accuracy metric, and `fit` on a
repeated dataset with `epochs`, `steps_per_epoch`, `validation_data` and
`validation_steps`; `fit` scales the loss and unscales the gradients itself.
The logged loss is Keras' `logs['loss']`, the epoch's running mean (TF 2.4
and Keras 3 alike). Edits: BERT, the tokenizer and GLUE/MRPC are replaced by
a small Sequential regressor and `batch(i)` (2 epochs of 4 steps, no
shuffle); `set_jit(False)` kept; no `save_pretrained` or PyTorch check.
"""

import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

import numpy as np

from _reduce import STEPS, Log, batch, seed

BATCH_SIZE = 8
EVAL_BATCH_SIZE = BATCH_SIZE * 2
USE_XLA = False
USE_AMP = True
EPOCHS = 2

num_labels = 1


class StepLog(tf.keras.callbacks.Callback):

  def __init__(self, log):
    super(StepLog, self).__init__()
    self.log = log

  def on_train_batch_end(self, batch_index, logs=None):
    self.log.step(logs['loss'], self.model.optimizer)


tf.config.optimizer.set_jit(USE_XLA)
tf.config.optimizer.set_experimental_options({"auto_mixed_precision": USE_AMP})

model = tf.keras.Sequential([
    tf.keras.Input(shape=(4,)),
    tf.keras.layers.Dense(8, activation='relu'),
    tf.keras.layers.Dense(num_labels, dtype='float32')])
seed(model)

train_x, train_y = zip(*[batch(i) for i in range(STEPS)])
valid_x, valid_y = zip(*[batch(i) for i in (STEPS, STEPS + 1)])
train_dataset = tf.data.Dataset.from_tensor_slices(
    (np.concatenate(train_x), np.concatenate(train_y)))
valid_dataset = tf.data.Dataset.from_tensor_slices(
    (np.concatenate(valid_x), np.concatenate(valid_y)))
train_dataset = train_dataset.batch(BATCH_SIZE).repeat(-1)
valid_dataset = valid_dataset.batch(EVAL_BATCH_SIZE)

opt = tf.keras.optimizers.Adam(learning_rate=3e-5, epsilon=1e-08)
if USE_AMP:
  opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(opt, "dynamic")

if num_labels == 1:
  loss = tf.keras.losses.MeanSquaredError()
else:
  loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

metric = tf.keras.metrics.SparseCategoricalAccuracy("accuracy")
model.compile(optimizer=opt, loss=loss, metrics=[metric])

train_steps = STEPS // EPOCHS
valid_steps = 1

log = Log(model)
history = model.fit(
    train_dataset,
    epochs=EPOCHS,
    steps_per_epoch=train_steps,
    validation_data=valid_dataset,
    validation_steps=valid_steps,
    callbacks=[StepLog(log)],
    verbose=0,
)
log.save()
