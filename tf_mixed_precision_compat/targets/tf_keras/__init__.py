"""The tf_keras target (`TF_USE_LEGACY_KERAS=1`): its classes and hooks.

`classes` holds the Keras classes tf_keras lost (the experimental
`LossScaleOptimizer` and `Policy`, `get_layer_policy`, the `compile`
wrapping); `restore`, `h5` and `deferred` teach tf_keras's own loaders TF
2.2-2.4's files. Only `install()` and `targets` import this subpackage.
"""
