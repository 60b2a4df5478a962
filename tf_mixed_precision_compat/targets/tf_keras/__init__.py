"""The tf_keras target (`TF_USE_LEGACY_KERAS=1`): everything it differs in.

`adapter` is its `KerasTarget`; `classes` the Keras classes tf_keras
dropped; `restore`, `h5`, `deferred` its loader hooks; `select` picks it.
"""
