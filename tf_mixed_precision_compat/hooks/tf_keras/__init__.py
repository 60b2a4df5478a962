"""The tf_keras target's hooks (`TF_USE_LEGACY_KERAS=1`).

`adapter` is its `KerasTarget`; `patches`, `restore`, `h5` and `deferred`
what it installs (its classes are `tf_keras_classes`); `select` picks it.
"""
