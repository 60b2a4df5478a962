"""The model of the TF 2.3 job in `tf23_trainer_job.py`, as TF 2.3 code.

It follows the global policy the job sets; the same file runs unchanged on
Keras 3 (`convert --model job_model:make_model --policy mixed_float16`).
"""

import tensorflow as tf


def make_model():
  return tf.keras.Sequential([
      tf.keras.layers.Dense(16, activation='relu', input_shape=(6,)),
      tf.keras.layers.Dense(8, activation='relu'),
      tf.keras.layers.Dense(1),
      tf.keras.layers.Activation('linear', dtype='float32'),
  ])
