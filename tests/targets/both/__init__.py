"""Tests written as TF 2.3/2.4 job code (`tf.keras...` after `install()`).

They hold on both targets: the default run tests Keras 3, and
`TF_USE_LEGACY_KERAS=1 python -m pytest tests/targets/both` (a CI stage)
tests tf_keras. `keras_target.active()` says which one a run has.
"""
