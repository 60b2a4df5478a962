"""`migrate`'s exact form for gradients that go on to other code.

TF 2.x's wrapper applied whatever gradients it was given; Keras 3's
`apply_gradients` divides them by its scale. Where a job's unscaled
gradients go on to other code (clipping, accumulation, densifying, an
all-reduce) before the apply, the migrated job unscales them as TF did and
multiplies what it applies by the scale, which Keras 3 divides out again.
Both multiplications are by powers of two, so the inner optimizer gets, bit
for bit, what TF 2.x's inner optimizer got.
"""

from __future__ import annotations

from typing import Any

import libcst as cst
from libcst import matchers as m

from tf_mixed_precision_compat.cli import _api_table as table
from tf_mixed_precision_compat.cli._facts import code
from tf_mixed_precision_compat.cli._rewrite_base import RewriterBase
from tf_mixed_precision_compat.cli._rewrite_base import Substitute

HELPER = '''

def _times(grad, factor):
  # migrate: a gradient times a factor in its dtype, as TF 2.x's wrapper
  # multiplied it (IndexedSlices stay sparse).
  if grad is None:
    return None
  factor = tf.cast(factor, grad.dtype)
  if isinstance(grad, tf.IndexedSlices):
    return tf.IndexedSlices(grad.values * factor, grad.indices,
                            grad.dense_shape)
  return grad * factor


def _scale(optimizer):
  # migrate: a fixed loss_scale_factor, a Keras 3 LossScaleOptimizer's
  # scale (its initial one until its first step builds it); else 1.
  if getattr(optimizer, "loss_scale_factor", None) is not None:
    return optimizer.loss_scale_factor
  if getattr(optimizer, "initial_scale", None) is None:
    return 1
  return optimizer.dynamic_scale if optimizer.built else optimizer.initial_scale


def _unscaled(grads, optimizer):
  # migrate: unscaled as TF 2.x's wrapper did, each gradient times 1 / scale.
  return [_times(g, 1 / _scale(optimizer)) for g in grads]


def _as_given(grads_and_vars, optimizer):
  # migrate: Keras 3's LossScaleOptimizer divides what it applies by its
  # scale; times the scale first (exact: a power of two), the gradients
  # reach the inner optimizer as given, as from TF 2.x's wrapper.
  return [(_times(g, _scale(optimizer)), v) for g, v in grads_and_vars]
'''
_UNSCALE = "_unscaled(GRADS, OPT)"
_AS_GIVEN = "_as_given(GV, OPT)"
UNSCALED = m.Call(func=m.Attribute(attr=m.Name("get_unscaled_gradients")))
_WRAPPED = m.Assign(targets=[m.AssignTarget(target=m.Name())], value=m.Call())


class GradientRewrites(RewriterBase):
  """get_unscaled_gradients whose result goes on, and the applies after."""

  def scan_rescaled(self, module: cst.Module) -> None:
    """Notes the optimizers whose unscaled gradients go on to other code,
    and the wrappers that never unscale what they apply."""
    self.rescaled = {
        code(call.func.value) for call in m.findall(module, UNSCALED)
        if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
        and len(call.args) == 1 and not self.facts.unscaled_only_applied(call)}
    for assign in m.findall(module, _WRAPPED):
      call = assign.value  # type: ignore[attr-defined]
      if any(table.is_tf2_lso(n)  # TF 2.x's, not Keras 3's
             for n in self._names(call.func)) and \
          self.facts.unscales_nothing(call):
        self.given_as_is.add(call)
        self.rescaled.add(code(assign.targets[0].target))  # type: ignore

  def _substitute(self, template: str, **values: cst.BaseExpression) -> Any:
    self.needs_helper = self.needs_tf = True
    return cst.parse_expression(template).visit(Substitute(values))

  def unscale_as_tf(self, original: cst.Call, updated: cst.Call
                    ) -> cst.BaseExpression:
    """`opt.get_unscaled_gradients(g)`: each times 1 / scale, as TF did."""
    self._add(original, "LossScaleOptimizer.get_unscaled_gradients",
              "_unscaled(grads, opt)",
              "the same products: each gradient times the reciprocal of the "
              "scale, in its dtype, as TF 2.x computed them; the code after "
              "sees what it saw", "rewrite")
    receiver = updated.func.value  # type: ignore[attr-defined]
    return self._substitute(_UNSCALE, OPT=receiver,
                            GRADS=updated.args[0].value)

  def apply_as_given(self, original: cst.Call, updated: cst.Call
                     ) -> cst.BaseExpression:
    """`opt.apply_gradients(gv)`: the gradients TF's inner optimizer got."""
    self._add(original, "LossScaleOptimizer.apply_gradients",
              "apply_gradients(_as_given(grads_and_vars, opt))",
              "each gradient times the scale, which Keras 3's "
              "apply_gradients divides out again (powers of two: exact), so "
              "the inner optimizer gets the gradients as given, as from TF "
              "2.x's wrapper; overflowing steps are still skipped",
              "rewrite")
    receiver = updated.func.value  # type: ignore[attr-defined]
    first: Any = updated.args[0]
    return updated.with_changes(args=[first.with_changes(
        value=self._substitute(_AS_GIVEN, OPT=receiver, GV=first.value)),
                                      *updated.args[1:]])

  def helper_statements(self) -> list[cst.BaseStatement]:
    """The helper the exact forms call, once, where a rewrite used it."""
    if not self.needs_helper:
      return []
    two = [cst.EmptyLine(), cst.EmptyLine()]
    body: list[cst.BaseStatement] = list(cst.parse_module(HELPER).body)
    body[0] = body[0].with_changes(leading_lines=two)
    return body
