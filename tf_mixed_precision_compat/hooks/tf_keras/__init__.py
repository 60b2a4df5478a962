"""The tf_keras target's hooks (`TF_USE_LEGACY_KERAS=1`): `adapter` is its
`KerasTarget`, `select` picks it (docs/architecture.md)."""
