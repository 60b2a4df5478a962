"""TF Model Garden's image classifier trainer: `compile`/`fit`, experimental.

Original: tensorflow/models, official/vision/image_classification/
classifier_trainer.py (commit 00d99cbb2cd5bc8908287b0da100431d807ed202, the
TF 2.3 era: `experimental_steps_per_execution`; `train_and_eval`,
`initialize`, `get_loss_scale`, `resume_from_checkpoint`, `_get_metrics`),
with official/modeling/performance.py of the same era
(`set_mixed_precision_policy(dtype, loss_scale)`: the experimental `Policy`
with `loss_scale` and `set_policy`) and the checkpoint callback of
official/vision/image_classification/callbacks.py (`get_callbacks`, commit
0c9253b4a0b34935cf78bd13e6520bbeee2f5f92, where that call is unchanged).

Calls kept in `train_and_eval`'s order: `tf.distribute.MirroredStrategy(
devices=["device:CPU:0"])` (what `get_distribution_strategy("mirrored",
num_gpus=0)` builds) and its scope; the datasets; `initialize`:
`tf.keras.mixed_precision.experimental.Policy("mixed_float16",
loss_scale="dynamic")` (`runtime.loss_scale: dynamic`) and
`tf.keras.mixed_precision.experimental.set_policy(policy)`,
`tf.keras.backend.set_image_data_format("channels_last")` without a GPU;
under the scope the model (its softmax `Activation` in float32, as the
ResNet's), `tf.keras.optimizers.SGD(learning_rate=, momentum=, nesterov=)`
(`build_optimizer("momentum", ...)`), the one-hot metrics
`CategoricalAccuracy(name="accuracy")` and `TopKCategoricalAccuracy(k=5,
name="top_5_accuracy")`, `CategoricalCrossentropy(label_smoothing=0.1)`,
`model.compile(optimizer=, loss=, metrics=,
experimental_steps_per_execution=1)` (which wraps the optimizer in a
LossScaleOptimizer with the policy's loss scale, as TF 2.3/2.4 did);
`resume_from_checkpoint`: `tf.train.latest_checkpoint(model_dir)`,
`model.load_weights(latest_checkpoint)` and `model.optimizer.iterations //
train_steps` as the initial epoch; `tf.keras.callbacks.ModelCheckpoint(
os.path.join(model_dir, "model.ckpt-{epoch:04d}"), save_weights_only=True,
verbose=1)`; `model.fit(train_dataset, epochs=, steps_per_epoch=,
initial_epoch=, callbacks=, verbose=2)`.

Shrunk: ImageNet replaced by seeded synthetic 8x8x3 images of 10 classes in
batches of 4 (repeated, not shuffled), ResNet-50 by one `Conv2D`, global
average pooling and a `Dense` layer, the `stepwise` learning rate schedule by
a constant 0.1, 2 epochs of 5 steps, no evaluation (`skip_eval`),
TensorBoard or time-history callbacks, config files or flags; the initial
weights from a seeded NumPy stream. Checkpoints: `ModelCheckpoint` writes one
per epoch; with `--out` the job copies the model directory after the first
(`--resume` names such a copy, read as the model directory). As the
original, a resumed `fit` reads the dataset from its start. Non-finite
steps: the images of the batches at steps 2 and 6 hold an inf.
"""

import os
import shutil
import sys
import tempfile

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jobreport  # pylint: disable=g-import-not-at-top,wrong-import-position

POISONED = (2, 6)
BATCH = 4
NUM_CLASSES = 10


def set_mixed_precision_policy(dtype, loss_scale=None):
  """official/modeling/performance.py (TF 2.3 era)."""
  if dtype == tf.float16:
    policy = tf.keras.mixed_precision.experimental.Policy(
        'mixed_float16', loss_scale=loss_scale)
    tf.keras.mixed_precision.experimental.set_policy(policy)
  elif dtype == tf.bfloat16:
    policy = tf.keras.mixed_precision.experimental.Policy('mixed_bfloat16')
    tf.keras.mixed_precision.experimental.set_policy(policy)
  elif dtype == tf.float32:
    tf.keras.mixed_precision.experimental.set_policy('float32')
  else:
    raise ValueError('Unexpected dtype: %s' % dtype)


def get_loss_scale(params, fp16_default=128.):
  loss_scale = params['runtime']['loss_scale']
  if loss_scale == 'dynamic':
    return loss_scale
  elif loss_scale is not None:
    return float(loss_scale)
  elif params['train_dataset']['dtype'] in ('float32', 'bfloat16'):
    return 1.
  return fp16_default


def _get_metrics(one_hot):
  if one_hot:
    return {
        'accuracy': tf.keras.metrics.CategoricalAccuracy(name='accuracy'),
        'top_5': tf.keras.metrics.TopKCategoricalAccuracy(
            k=5, name='top_5_accuracy'),
    }
  return {
      'accuracy': tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy'),
      'top_5': tf.keras.metrics.SparseTopKCategoricalAccuracy(
          k=5, name='top_5_accuracy'),
  }


def resume_from_checkpoint(model, model_dir, train_steps):
  latest_checkpoint = tf.train.latest_checkpoint(model_dir)
  if not latest_checkpoint:
    return 0
  model.load_weights(latest_checkpoint)
  initial_epoch = model.optimizer.iterations // train_steps
  return int(initial_epoch)


def initialize(params, dataset_dtype):
  set_mixed_precision_policy(dataset_dtype, get_loss_scale(params))
  if tf.config.list_physical_devices('GPU'):
    data_format = 'channels_first'
  else:
    data_format = 'channels_last'
  tf.keras.backend.set_image_data_format(data_format)


def get_callbacks(model_checkpoint=True, model_dir=None):
  model_dir = model_dir or ''
  callbacks = []
  if model_checkpoint:
    ckpt_full_path = os.path.join(model_dir, 'model.ckpt-{epoch:04d}')
    callbacks.append(tf.keras.callbacks.ModelCheckpoint(
        ckpt_full_path, save_weights_only=True, verbose=1))
  return callbacks


def build_dataset(one_hot):
  rng = np.random.RandomState(5)
  n = BATCH * jobreport.STEPS
  images = rng.uniform(size=(n, 8, 8, 3)).astype('float32')
  labels = rng.randint(0, NUM_CLASSES, size=(n,))
  for step in POISONED:
    images[step * BATCH, 0, 0, 0] = np.inf
  if one_hot:
    labels = np.eye(NUM_CLASSES, dtype='float32')[labels]
  return (tf.data.Dataset.from_tensor_slices((images, labels))
          .repeat().batch(BATCH))


def resnet_like(num_classes):
  inputs = tf.keras.Input(shape=(8, 8, 3))
  x = tf.keras.layers.Conv2D(4, 3, padding='same', activation='relu')(inputs)
  x = tf.keras.layers.GlobalAveragePooling2D()(x)
  x = tf.keras.layers.Dense(num_classes)(x)
  outputs = tf.keras.layers.Activation('softmax', dtype='float32')(x)
  return tf.keras.Model(inputs, outputs, name='resnet_like')


class _Record(tf.keras.callbacks.Callback):
  """Harness: one line per step; with --out, a copy after the first epoch."""

  def __init__(self, train_steps, model_dir):
    super().__init__()
    self.train_steps = train_steps
    self.model_dir = model_dir
    self.epoch = 0

  def on_epoch_begin(self, epoch, logs=None):
    self.epoch = epoch

  def on_train_batch_begin(self, batch, logs=None):
    self.before = jobreport.values(self.model.trainable_weights)

  def on_train_batch_end(self, batch, logs=None):
    jobreport.emit(jobreport.keras_record(
        self.epoch * self.train_steps + batch, self.model.optimizer,
        self.before, jobreport.values(self.model.trainable_weights)))

  def on_epoch_end(self, epoch, logs=None):
    if args.out and epoch == 0:  # After ModelCheckpoint wrote epoch 1.
      folder = os.path.join(args.out, 'midway')
      shutil.copytree(self.model_dir, folder)
      jobreport.checkpoint_event(tf.train.latest_checkpoint(folder))


def train_and_eval(params):
  strategy = tf.distribute.MirroredStrategy(devices=['device:CPU:0'])
  strategy_scope = strategy.scope()

  label_smoothing = params['model']['loss']['label_smoothing']
  one_hot = label_smoothing and label_smoothing > 0
  train_dataset = build_dataset(one_hot)
  train_epochs = params['train']['epochs']
  train_steps = params['train']['steps']

  initialize(params, tf.float16)

  with strategy_scope:
    model = resnet_like(NUM_CLASSES)
    rng = np.random.RandomState(7)  # Harness: seeded weights.
    model.set_weights([rng.uniform(-0.5, 0.5, size=w.shape).astype('float32')
                       for w in model.get_weights()])
    learning_rate = params['model']['learning_rate']['initial_lr']
    optimizer_params = params['model']['optimizer']
    optimizer = tf.keras.optimizers.SGD(
        learning_rate=learning_rate,
        momentum=optimizer_params['momentum'],
        nesterov=optimizer_params['nesterov'])

    metrics_map = _get_metrics(one_hot)
    metrics = [metrics_map[metric] for metric in params['train']['metrics']]

    if one_hot:
      loss_obj = tf.keras.losses.CategoricalCrossentropy(
          label_smoothing=params['model']['loss']['label_smoothing'])
    else:
      loss_obj = tf.keras.losses.SparseCategoricalCrossentropy()
    model.compile(optimizer=optimizer,
                  loss=loss_obj,
                  metrics=metrics,
                  experimental_steps_per_execution=params['train'][
                      'steps_per_loop'])

    initial_epoch = 0
    if params['train']['resume_checkpoint']:
      initial_epoch = resume_from_checkpoint(model=model,
                                             model_dir=params['model_dir'],
                                             train_steps=train_steps)

    callbacks = get_callbacks(
        model_checkpoint=params['train']['callbacks'][
            'enable_checkpoint_and_export'],
        model_dir=params['model_dir'])

  callbacks.append(_Record(train_steps, params['model_dir']))
  model.fit(train_dataset,
            epochs=train_epochs,
            steps_per_epoch=train_steps,
            initial_epoch=initial_epoch,
            callbacks=callbacks,
            verbose=2)


def main():
  tf.random.set_seed(7)
  params = {
      'model_dir': args.resume or tempfile.mkdtemp(),
      'runtime': {'loss_scale': 'dynamic'},
      'train_dataset': {'dtype': 'float16'},
      'model': {'loss': {'label_smoothing': 0.1},
                'learning_rate': {'initial_lr': 0.1},
                'optimizer': {'name': 'momentum', 'momentum': 0.9,
                              'nesterov': False}},
      'train': {'epochs': 2, 'steps': jobreport.MIDWAY, 'steps_per_loop': 1,
                'resume_checkpoint': True, 'metrics': ['accuracy', 'top_5'],
                'callbacks': {'enable_checkpoint_and_export': True}},
  }
  train_and_eval(params)


args = jobreport.parse_args()
if __name__ == '__main__':
  main()
