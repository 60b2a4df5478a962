"""The all-gradients finite check, in every form it takes.

`_scaling.local_all_finite` checks each gradient on its own in executor
graphs, concatenates the small ones per dtype under XLA, and runs as one
compiled call eagerly for 8 or more gradients. Whichever form is taken, a
single NaN or inf in any gradient (small or large, float16 or float32, dense
or `IndexedSlices`) must make the verdict False, and None gradients are
skipped.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tf_mixed_precision_compat.loss_scale import _scaling

# Ten small gradients (so eagerly the compiled path is taken), one larger
# than the XLA concatenation limit, a float16 one and a sparse one.
_SHAPES = [(3, 4)] * 9 + [(300, 300)]


def _grads(poison_index=None, bad=np.inf):
  rng = np.random.default_rng(0)
  dense = [rng.standard_normal(s).astype(np.float32) for s in _SHAPES]
  half = rng.standard_normal((5,)).astype(np.float16)
  sparse_values = rng.standard_normal((2, 3)).astype(np.float32)
  arrays = dense + [half, sparse_values]
  if poison_index is not None:
    arrays[poison_index].flat[-1] = bad
  grads = [tf.constant(a) for a in arrays[:-1]]
  grads.append(tf.IndexedSlices(tf.constant(arrays[-1]), tf.constant([0, 2]),
                                tf.constant([4, 3])))
  grads.insert(3, None)
  return grads


def _verdict(mode, grads):
  if mode == "eager":
    return bool(_scaling.local_all_finite(grads))
  fn = tf.function(_scaling.local_all_finite, jit_compile=(mode == "jit"))
  return bool(fn(grads))


class LocalAllFiniteTest(parameterized.TestCase):

  @parameterized.parameters("eager", "function", "jit")
  def test_all_finite(self, mode):
    self.assertTrue(_verdict(mode, _grads()))

  @parameterized.product(mode=("eager", "function", "jit"),
                         index=(0, 8, 9, 10, 11), bad=(np.inf, -np.inf,
                                                       np.nan))
  def test_one_bad_element_anywhere(self, mode, index, bad):
    # 9: the large gradient; 10: float16; 11: the IndexedSlices values.
    self.assertFalse(_verdict(mode, _grads(index, bad)))

  def test_empty_and_all_none(self):
    self.assertTrue(bool(_scaling.local_all_finite([])))
    self.assertTrue(bool(_scaling.local_all_finite([None, None])))


if __name__ == "__main__":
  from absl.testing import absltest  # pylint: disable=g-import-not-at-top
  absltest.main()
