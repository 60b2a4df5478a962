"""TensorFlowTTS's MelGAN training (GanBasedTrainer), experimental API.

Original: TensorSpeech/TensorFlowTTS, tensorflow_tts/trainers/base_trainer.py
(commit 7ae5572b5f41f1a0eff0bfb6dc7544fcdcfb921c, `GanBasedTrainer`) and
examples/melgan/train_melgan.py (commit
ac4508af616ddf718b716ca5cd0f8d927b021b9f, `MelganTrainer`, `main`).

Calls kept in the trainer's order: `return_strategy()`'s
`OneDeviceStrategy("/cpu:0")` without a GPU;
`tf.config.optimizer.set_experimental_options({"auto_mixed_precision": True})`;
generator and discriminator built under `strategy.scope()` by a dummy call;
two `tf.keras.optimizers.Adam(**params)`, each wrapped by
`tf.keras.mixed_precision.experimental.LossScaleOptimizer(opt, "dynamic")`;
losses `MeanSquaredError` / `MeanAbsoluteError` with
`reduction=tf.keras.losses.Reduction.NONE`; `metrics.Mean` per loss with
`reset_states()`; the step as `tf.function(..., input_signature=[
dataset.element_spec])` around `strategy.run` over the distributed dataset;
per replica `tf.nn.compute_average_loss`, `get_scaled_loss`, `tf.gradients`
(not a tape), `get_unscaled_gradients`, `apply_gradients`, generator then
discriminator; checkpointing as `create_checkpoint_manager` /
`save_checkpoint` / `load_checkpoint`: `tf.train.Checkpoint(steps=, epochs=,
gen_optimizer=, dis_optimizer=)`, `CheckpointManager.save(checkpoint_number=
steps)`, `save_weights` of both models to `.h5` files, and on resume
`ckpt.restore`, `iterations.assign` on both optimizers and `load_weights`.

Shrunk: the MelGAN generator and multi-scale discriminator replaced by two
small Conv1D `Sequential` models, the audio/mel dataset by seeded synthetic
batches (4 items of 16 frames x 8 mels, 64 samples), the YAML config by a
dict, 10 steps with the discriminator trained from step 0
(`discriminator_train_start_steps: 0`), no gradient accumulation, no
evaluation or tensorboard writing; initial weights from a seeded NumPy stream.
Non-finite steps: the mels of the batches at steps 2 and 6 hold an inf.
"""

import os
import sys

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jobreport  # pylint: disable=g-import-not-at-top,wrong-import-position

POISONED = (2, 6)


def return_strategy():
  physical_devices = tf.config.list_physical_devices("GPU")
  if len(physical_devices) == 0:
    return tf.distribute.OneDeviceStrategy(device="/cpu:0")
  elif len(physical_devices) == 1:
    return tf.distribute.OneDeviceStrategy(device="/gpu:0")
  return tf.distribute.MirroredStrategy()


class MelganTrainer(object):
  """The parts of GanBasedTrainer/MelganTrainer on the training path."""

  def __init__(self, config, strategy, steps=0, epochs=0,
               is_generator_mixed_precision=False,
               is_discriminator_mixed_precision=False):
    self.steps = steps
    self.epochs = epochs
    self.config = config
    self._strategy = strategy
    self._is_generator_mixed_precision = is_generator_mixed_precision
    self._is_discriminator_mixed_precision = is_discriminator_mixed_precision
    self._already_apply_input_signature = False
    self.list_metrics_name = ["gen_loss", "dis_loss"]
    with self._strategy.scope():
      self.train_metrics = {
          name: tf.keras.metrics.Mean(name="train_" + name, dtype=tf.float32)
          for name in self.list_metrics_name}
    for metric in self.train_metrics.values():
      metric.reset_states()

  def compile(self, gen_model, dis_model, gen_optimizer, dis_optimizer):
    self._generator = gen_model
    self._discriminator = dis_model
    self._gen_optimizer = gen_optimizer
    if self._is_generator_mixed_precision:
      self._gen_optimizer = (
          tf.keras.mixed_precision.experimental.LossScaleOptimizer(
              self._gen_optimizer, "dynamic"))
    self._dis_optimizer = dis_optimizer
    if self._is_discriminator_mixed_precision:
      self._dis_optimizer = (
          tf.keras.mixed_precision.experimental.LossScaleOptimizer(
              self._dis_optimizer, "dynamic"))
    self.mse_loss = tf.keras.losses.MeanSquaredError(
        reduction=tf.keras.losses.Reduction.NONE)
    self.mae_loss = tf.keras.losses.MeanAbsoluteError(
        reduction=tf.keras.losses.Reduction.NONE)

  def create_checkpoint_manager(self, saved_path, max_to_keep=10):
    os.makedirs(saved_path, exist_ok=True)
    self.saved_path = saved_path
    self.ckpt = tf.train.Checkpoint(
        steps=tf.Variable(1), epochs=tf.Variable(1),
        gen_optimizer=self._gen_optimizer,
        dis_optimizer=self._dis_optimizer)
    self.ckp_manager = tf.train.CheckpointManager(
        self.ckpt, saved_path, max_to_keep=max_to_keep)

  def save_checkpoint(self):
    self.ckpt.steps.assign(self.steps)
    self.ckpt.epochs.assign(self.epochs)
    path = self.ckp_manager.save(checkpoint_number=self.steps)
    self._generator.save_weights(
        self.saved_path + "generator-{}.h5".format(self.steps))
    self._discriminator.save_weights(
        self.saved_path + "discriminator-{}.h5".format(self.steps))
    return path

  def load_checkpoint(self, pretrained_path):
    self.ckpt.restore(pretrained_path)
    self.steps = self.ckpt.steps.numpy()
    self.epochs = self.ckpt.epochs.numpy()
    self._gen_optimizer = self.ckpt.gen_optimizer
    self._gen_optimizer.iterations.assign(tf.cast(self.steps, tf.int64))
    discriminator_train_start_steps = tf.math.maximum(
        0, self.steps - self.config["discriminator_train_start_steps"])
    self._dis_optimizer = self.ckpt.dis_optimizer
    self._dis_optimizer.iterations.assign(
        tf.cast(discriminator_train_start_steps, tf.int64))
    self._generator.load_weights(
        self.saved_path + "generator-{}.h5".format(self.steps))
    self._discriminator.load_weights(
        self.saved_path + "discriminator-{}.h5".format(self.steps))

  def compute_per_example_generator_losses(self, batch, outputs):
    p_hat = self._discriminator(outputs)
    adv_loss = tf.reduce_mean(
        self.mse_loss(tf.ones_like(p_hat), p_hat), axis=-1)
    fm_loss = tf.reduce_mean(
        self.mae_loss(tf.expand_dims(batch["audios"], 2), outputs), axis=-1)
    adv_loss += self.config["lambda_feat_match"] * fm_loss
    return adv_loss, {"gen_loss": adv_loss}

  def compute_per_example_discriminator_losses(self, batch, gen_outputs):
    p = self._discriminator(tf.expand_dims(batch["audios"], 2))
    p_hat = self._discriminator(gen_outputs)
    real_loss = tf.reduce_mean(self.mse_loss(tf.ones_like(p), p), axis=-1)
    fake_loss = tf.reduce_mean(
        self.mse_loss(tf.zeros_like(p_hat), p_hat), axis=-1)
    dis_loss = real_loss + fake_loss
    return dis_loss, {"dis_loss": dis_loss}

  def _calculate_generator_gradient_per_batch(self, batch):
    outputs = self._generator(batch["mels"], training=True)
    per_example_losses, dict_metrics_losses = (
        self.compute_per_example_generator_losses(batch, outputs))
    per_replica_gen_losses = tf.nn.compute_average_loss(
        per_example_losses,
        global_batch_size=self.config["batch_size"]
        * self._strategy.num_replicas_in_sync
        * self.config["gradient_accumulation_steps"])
    if self._is_generator_mixed_precision:
      scaled_per_replica_gen_losses = self._gen_optimizer.get_scaled_loss(
          per_replica_gen_losses)
      scaled_gradients = tf.gradients(
          scaled_per_replica_gen_losses, self._generator.trainable_variables)
      gradients = self._gen_optimizer.get_unscaled_gradients(scaled_gradients)
    else:
      gradients = tf.gradients(
          per_replica_gen_losses, self._generator.trainable_variables)
    for name, value in dict_metrics_losses.items():
      self.train_metrics[name].update_state(value)
    return gradients, per_replica_gen_losses

  def _calculate_discriminator_gradient_per_batch(self, batch):
    per_example_losses, dict_metrics_losses = (
        self.compute_per_example_discriminator_losses(
            batch, self._generator(batch["mels"], training=True)))
    per_replica_dis_losses = tf.nn.compute_average_loss(
        per_example_losses,
        global_batch_size=self.config["batch_size"]
        * self._strategy.num_replicas_in_sync
        * self.config["gradient_accumulation_steps"])
    if self._is_discriminator_mixed_precision:
      scaled_per_replica_dis_losses = self._dis_optimizer.get_scaled_loss(
          per_replica_dis_losses)
      scaled_gradients = tf.gradients(
          scaled_per_replica_dis_losses,
          self._discriminator.trainable_variables)
      gradients = self._dis_optimizer.get_unscaled_gradients(scaled_gradients)
    else:
      gradients = tf.gradients(
          per_replica_dis_losses, self._discriminator.trainable_variables)
    for name, value in dict_metrics_losses.items():
      self.train_metrics[name].update_state(value)
    return gradients, per_replica_dis_losses

  def _one_step_forward_per_replica(self, batch):
    gradients, per_replica_gen_losses = (
        self._calculate_generator_gradient_per_batch(batch))
    self._gen_optimizer.apply_gradients(
        zip(gradients, self._generator.trainable_variables))
    per_replica_dis_losses = 0.0
    if self.steps >= self.config["discriminator_train_start_steps"]:
      gradients, per_replica_dis_losses = (
          self._calculate_discriminator_gradient_per_batch(batch))
      self._dis_optimizer.apply_gradients(
          zip(gradients, self._discriminator.trainable_variables))
    return per_replica_gen_losses + per_replica_dis_losses

  def _one_step_forward(self, batch):
    per_replica_losses = self._strategy.run(
        self._one_step_forward_per_replica, args=(batch,))
    return self._strategy.reduce(
        tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

  def _train_step(self, batch):
    if self._already_apply_input_signature is False:
      self.one_step_forward = tf.function(
          self._one_step_forward,
          input_signature=[self._train_element_signature])
      self._already_apply_input_signature = True
    self.one_step_forward(batch)
    self.steps += 1

  def fit(self, train_dataset, saved_path, resume=""):
    self._train_element_signature = train_dataset.element_spec
    train_data_loader = self._strategy.experimental_distribute_dataset(
        train_dataset)
    with self._strategy.scope():
      self.create_checkpoint_manager(saved_path=saved_path, max_to_keep=10000)
      if len(resume) > 1:
        self.load_checkpoint(resume)
    models = (self._generator, self._discriminator)
    for index, batch in enumerate(train_data_loader):
      if index < self.steps:  # Harness: the batches already trained on.
        continue
      if self.steps >= self.config["train_max_steps"]:
        break
      before = [jobreport.values(m.trainable_variables) for m in models]
      step = int(self.steps)
      self._train_step(batch)
      after = [jobreport.values(m.trainable_variables) for m in models]
      dis = jobreport.keras_record(step, self._dis_optimizer, before[1],
                                   after[1])
      dis.pop("step")
      rec = jobreport.keras_record(step, self._gen_optimizer, before[0],
                                   after[0])
      rec["dis"] = dis
      jobreport.emit(rec)
      if (self.steps % self.config["save_interval_steps"] == 0 and args.out
          and self.steps == jobreport.MIDWAY):  # Harness: only midway.
        jobreport.checkpoint_event(self.save_checkpoint())
    for metric in self.train_metrics.values():
      metric.reset_states()


def make_dataset(config, rng):
  batches = config["train_max_steps"]
  n = config["batch_size"] * batches
  mels = rng.normal(size=(n, 16, 8)).astype("float32")
  audios = rng.uniform(-1., 1., size=(n, 64)).astype("float32")
  for step in POISONED:
    mels[step * config["batch_size"], 0, 0] = np.inf
  return tf.data.Dataset.from_tensor_slices(
      {"mels": mels, "audios": audios}).batch(config["batch_size"])


def main():
  strategy = return_strategy()
  tf.config.optimizer.set_experimental_options({"auto_mixed_precision": True})
  rng = np.random.RandomState(3)
  config = {"batch_size": 4, "gradient_accumulation_steps": 1,
            "train_max_steps": jobreport.STEPS,
            "save_interval_steps": jobreport.MIDWAY,
            "discriminator_train_start_steps": 0, "lambda_feat_match": 10.0,
            "generator_optimizer_params": {"learning_rate": 1e-4,
                                           "beta_1": 0.5, "beta_2": 0.9},
            "discriminator_optimizer_params": {"learning_rate": 1e-4,
                                               "beta_1": 0.5, "beta_2": 0.9}}
  train_dataset = make_dataset(config, rng)

  trainer = MelganTrainer(steps=0, epochs=0, config=config, strategy=strategy,
                          is_generator_mixed_precision=True,
                          is_discriminator_mixed_precision=True)
  with strategy.scope():
    generator = tf.keras.Sequential([
        tf.keras.layers.Conv1D(8, 3, padding="same", activation="relu",
                               input_shape=(16, 8)),
        tf.keras.layers.UpSampling1D(4),
        tf.keras.layers.Conv1D(1, 3, padding="same", activation="tanh"),
    ], name="melgan_generator")
    discriminator = tf.keras.Sequential([
        tf.keras.layers.Conv1D(4, 5, strides=2, padding="same",
                               input_shape=(64, 1)),
        tf.keras.layers.LeakyReLU(0.2),
        tf.keras.layers.Conv1D(1, 3, padding="same"),
    ], name="melgan_discriminator")
    fake_mels = tf.random.uniform(shape=[1, 16, 8], dtype=tf.float32)
    y_hat = generator(fake_mels)
    discriminator(y_hat)
    for model in (generator, discriminator):  # Harness: seeded weights.
      model.set_weights([rng.uniform(-0.3, 0.3, size=w.shape).astype("float32")
                         for w in model.get_weights()])
    gen_optimizer = tf.keras.optimizers.Adam(
        **config["generator_optimizer_params"])
    dis_optimizer = tf.keras.optimizers.Adam(
        **config["discriminator_optimizer_params"])

  trainer.compile(gen_model=generator, dis_model=discriminator,
                  gen_optimizer=gen_optimizer, dis_optimizer=dis_optimizer)
  # Harness: --out DIR saves to DIR/checkpoints/; --resume DIR names such a
  # folder, which the job's own code reads as its saved_path.
  if args.resume:
    saved_path = os.path.join(args.resume, "")
    resume = tf.train.latest_checkpoint(args.resume)
  else:
    saved_path = os.path.join(args.out or "/tmp/melgan_job", "checkpoints/")
    resume = ""
  trainer.fit(train_dataset, saved_path=saved_path, resume=resume)


args = jobreport.parse_args()
if __name__ == "__main__":
  main()
