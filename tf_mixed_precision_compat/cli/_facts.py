"""What `migrate` learns from a whole file before it rewrites any of it.

One read-only pass (docs/architecture.md); the rewrites ask these facts.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional, Union

import libcst as cst
from libcst import matchers as m
from libcst.metadata import ExpressionContext
from libcst.metadata import ExpressionContextProvider
from libcst.metadata import PositionProvider
from libcst.metadata import QualifiedNameProvider

from tf_mixed_precision_compat.cli import _api_table as table

# Receiver names saying "optimizer"; a bare `opt` counts only when assigned
# from an optimizer (argparse namespaces are often called `opt` too).
_OPTIMIZER_WORD = re.compile(r"optimi[sz]er", re.IGNORECASE)
_OPT_WORD = re.compile(r"(^|_)opt(im)?($|_)", re.IGNORECASE)
_POLICY_WORD = re.compile(r"policy", re.IGNORECASE)
# Receivers holding settings (FLAGS.loss_scale, params.runtime.loss_scale).
_CONFIG_WORD = re.compile(
    r"^(flags|flags_obj|config|cfg|conf|params|hparams|hps|args|opts|"
    r"options|settings|runtime|.*_(config|cfg|params|args|flags))$",
    re.IGNORECASE)
# Calls whose result is a Keras model (builders are named after it).
_MODEL_WORD = re.compile(r"model|sequential|net\b|network", re.IGNORECASE)
_FINITE_CHECKS = ("is_finite", "is_inf", "is_nan", "reduce_all", "reduce_any",
                  "check_numerics")
_DYNAMIC_ARG_ORDER = ("initial_loss_scale", "increment_period", "multiplier")
# A policy's properties: reading them hands the policy to nothing.
_POLICY_PROPERTIES = ("loss_scale", "name", "compute_dtype", "variable_dtype",
                      "should_cast_variables")


@dataclasses.dataclass
class Assignment:
  """Where a name was first bound in a scope, and to what kind of value."""
  line: int
  kind: str  # "optimizer", "lso", "policy", "model", "loss_scale" or "other"
  value: Optional[cst.BaseExpression] = None


# A policy's loss scale as TF 2.3 held it: the original argument, "default"
# (absent or 'auto': dynamic for mixed_float16, None otherwise), or None for
# an unknown one.
LossScale = Union[cst.BaseExpression, str, None]


def code(node: cst.CSTNode) -> str:
  """The source text of `node`."""
  return cst.Module([]).code_for_node(node)


def looks_like_optimizer(node: cst.BaseExpression) -> bool:
  """A receiver whose name says optimizer (for calls only optimizers make).

  Example:

  >>> looks_like_optimizer(cst.parse_expression("self.d_opt"))
  True
  """
  name = last_name(node) or ""
  return bool(_OPTIMIZER_WORD.search(name) or _OPT_WORD.search(name))


def last_name(node: cst.BaseExpression) -> Optional[str]:
  """`b` of `a.b`, `a` of `a`; None for other expressions.

  Example:

  >>> last_name(cst.parse_expression("self.optimizer"))
  'optimizer'
  """
  if isinstance(node, cst.Name):
    return node.value
  if isinstance(node, cst.Attribute):
    return node.attr.value
  return None


def _is_keras_lso(names: list[str]) -> bool:
  return any(n.startswith("keras.") and n.endswith("LossScaleOptimizer")
             for n in names)


_MAIN_GUARD = m.If(test=m.Comparison(
    left=m.Name("__name__"), comparisons=[m.ComparisonTarget(
        operator=m.Equal(), comparator=m.SimpleString())]))


def _is_program(module: cst.Module) -> bool:
  """A program (a `__main__` guard or a top-level loop), not a library whose
  functions other files call."""
  return any(m.matches(s, _MAIN_GUARD | m.For() | m.While())
             for s in module.body)


class Facts(cst.CSTVisitor):
  """The facts of one module; `Migrator` reads them while it rewrites."""

  METADATA_DEPENDENCIES = (PositionProvider, QualifiedNameProvider,
                           ExpressionContextProvider)

  def __init__(self) -> None:
    super().__init__()
    self._scopes: list[str] = ["<module>"]
    self._functions: list[str] = []
    self._factories: set[str] = set()  # functions wrapping an optimizer
    self._returning: set[str] = set()  # functions returning a value
    self._factory_results: list[tuple[tuple[str, int, str], str]] = []
    self._callees: dict[str, set[str]] = {}  # function -> what it calls
    self.assigned: dict[tuple[str, str], Assignment] = {}  # first in scope
    self.is_program = False  # Not a library other files call (_is_program).
    self.self_attrs: dict[str, str] = {}  # `self.opt = ...`'s names -> kind
    self.apply_vars: dict[str, str] = {}  # optimizer name -> its var list
    self.lso_sites: list[tuple[str, int, str]] = []  # name, line, scope
    self.lso_names: set[tuple[str, str]] = set()  # (scope, name), any LSO
    self.policy_calls: set[cst.Call] = set()
    self.global_policy_calls: set[cst.Call] = set()
    self.families: dict[cst.Call, str] = {}  # optimizer constructors' kind
    # Classes and functions of this file building optimizers -> their kind.
    self.class_families: dict[str, str] = {}
    self.keras_wrapped: set[tuple[str, str]] = set()  # (scope, name)
    self.global_policies: list[cst.BaseExpression] = []  # set_policy args
    self.has_compile = False
    self.called: set[str] = set()  # qualified names of what the file calls
    self.built_guards: set[str] = set()  # models with a migrate build guard
    self.built_after: set[str] = set()  # optimizers with `.build(` after them
    # get_unscaled_gradients calls -> (scope, line, the name they bind).
    self._unscaled: dict[cst.Call, tuple[str, int, Optional[str]]] = {}
    self._loads: dict[tuple[str, str], list[tuple[int, cst.Name]]] = {}
    self._applied: set[cst.CSTNode] = set()  # zip(X, ...) in apply_gradients
    self._finite_checks = 0  # depth inside is_finite(...), reduce_all(...)
    self._property_reads: set[cst.Name] = set()  # `policy` of policy.name
    # `x` of `x.attr` -> "attr"; a name used otherwise is handed on.
    self._receivers: dict[cst.Name, str] = {}
    self._rewritten: dict[cst.Call, cst.BaseExpression] = {}  # -> wrapped
    # A bound value -> (scope, name, line) of its binding.
    self._binds: dict[cst.BaseExpression, tuple[str, str, int]] = {}

  def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
    line = self.get_metadata(PositionProvider, node).start.line
    self._scopes.append(f"{node.name.value}@{line}")
    self._functions.append(node.name.value)
    for param in (*node.params.params, *node.params.kwonly_params,
                  *node.params.posonly_params):
      self.assigned.setdefault((self.scope, param.name.value),
                               Assignment(line, "other"))

  def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
    self._scopes.pop()
    self._functions.pop()

  def leave_Module(self, original_node: cst.Module) -> None:
    self.is_program = _is_program(original_node)
    # Optimizers from this file's factories (functions that wrap one for
    # loss scaling, e.g. `configure_optimizer`, or call one that does) are
    # sites like direct ones.
    self._factories &= self._returning
    while more := {f for f, callees in self._callees.items()
                   if callees & self._factories and f in self._returning
                   } - self._factories:
      self._factories |= more
    self.lso_sites += [site for site, callee in self._factory_results
                       if callee in self._factories]

  @property
  def scope(self) -> str:
    return self._scopes[-1]

  def names(self, node: cst.CSTNode) -> list[str]:
    """The normalised qualified names of `node` (during this pass only)."""
    return sorted(table.normalise(q.name) for q in
                  self.get_metadata(QualifiedNameProvider, node, set()))

  def _kind(self, value: cst.BaseExpression) -> str:
    if isinstance(value, cst.Attribute) and value.attr.value == "loss_scale":
      return "loss_scale"
    if m.matches(value, m.Attribute(attr=m.Name("optimizer"))):
      return "optimizer"
    if not isinstance(value, cst.Call):
      return "other"
    names = self.names(value.func)
    if any(n.endswith("LossScaleOptimizer") for n in names):
      return "lso"
    if any(n.endswith("enable_mixed_precision_graph_rewrite") or
           n.startswith("keras.optimizers.") or
           n.startswith("tf.compat.v1.train.") and n.endswith("Optimizer")
           for n in names):
      return "optimizer"
    if any(n.endswith(("Policy", "global_policy")) for n in names):
      return "policy"
    name = last_name(value.func) or ""
    if _OPTIMIZER_WORD.search(name):
      return "optimizer"
    if any(n.startswith(("keras.Model", "keras.Sequential", "keras.models."))
           for n in names) or _MODEL_WORD.search(name):
      return "model"
    return "other"

  def visit_ClassDef(self, node: cst.ClassDef) -> None:
    for base in node.bases:
      names = self.names(base.value)
      if any(n.startswith("keras.optimizers.") for n in names):
        self.class_families[node.name.value] = "keras"
      elif any(n.startswith(("tf.compat.v1.train.", "tf.train.")) and
               n.endswith("Optimizer") for n in names):
        self.class_families[node.name.value] = "v1"

  def leave_Return(self, original_node: cst.Return) -> None:
    value = original_node.value
    if value is not None and self._functions:
      self._returning.add(self._functions[-1])
      family = self.optimizer_family(value)
      if family is not None:
        self.class_families.setdefault(self._functions[-1], family)

  def visit_Attribute(self, node: cst.Attribute) -> None:
    if isinstance(node.value, cst.Name):
      self._receivers[node.value] = node.attr.value
      if node.attr.value in _POLICY_PROPERTIES:
        self._property_reads.add(node.value)

  def visit_Name(self, node: cst.Name) -> None:
    if self.get_metadata(ExpressionContextProvider, node,
                         None) == ExpressionContext.LOAD:
      line = self.get_metadata(PositionProvider, node).start.line
      self._loads.setdefault((self.scope, node.value), []).append(
          (line, node))
      if self._finite_checks:
        # Dividing by a power of two keeps finiteness: checks may read
        # the gradients scaled or not.
        self._applied.add(node)

  def visit_Assign(self, node: cst.Assign) -> None:
    line = self.get_metadata(PositionProvider, node).start.line
    if m.matches(node.value, m.Call(func=m.Attribute(
        attr=m.Name("get_unscaled_gradients")))):
      bound = node.targets[0].target if len(node.targets) == 1 else None
      self._unscaled[node.value] = (  # type: ignore[index]
          self.scope, line,
          bound.value if isinstance(bound, cst.Name) else None)
    kind = self._kind(node.value)
    if isinstance(node.value, cst.Call) and _is_keras_lso(
        self.names(node.value.func)):
      self.lso_names.update((self.scope, code(t.target))
                            for t in node.targets)
    callee = (last_name(node.value.func) if isinstance(node.value, cst.Call)
              else None)
    wraps = self._wraps_for_loss_scaling(node.value)
    for target in node.targets:
      t = target.target
      on_self = m.matches(t, m.Attribute(value=m.Name("self")))
      if not (on_self or isinstance(t, cst.Name)):
        continue
      if callee is not None:
        self._factory_results.append(((code(t), line, self.scope), callee))
      if on_self:
        self.self_attrs.setdefault(t.attr.value, kind)  # type: ignore
      name = t.value if isinstance(t, cst.Name) else code(t)
      self.assigned.setdefault((self.scope, name),
                               Assignment(line, kind, node.value))
      self._binds[node.value] = (self.scope, name, line)
      if wraps:
        self.lso_sites.append((name, line, self.scope))

  def _wraps_for_loss_scaling(self, value: cst.BaseExpression) -> bool:
    """A TF 2.x call returning a Keras 3 LossScaleOptimizer once migrated."""
    if not (isinstance(value, cst.Call) and value.args):
      return False
    names = self.names(value.func)
    if any(n in table.GRAPH_REWRITE for n in names):
      return self.optimizer_family(value.args[0].value) != "v1"
    return any(n in table.FUNCTIONS and n.startswith("keras.") and
               n.endswith("LossScaleOptimizer") for n in names)

  def optimizer_family(self, node: cst.BaseExpression,
                       scope: Optional[str] = None) -> Optional[str]:
    """"keras" or "v1": the kind of optimizer `node` builds or names."""
    scope = scope or self.scope
    if isinstance(node, cst.Name):
      if (scope, node.value) in self.keras_wrapped:
        return "keras"
      found = self.lookup(scope, node.value)
      node = found.value if found is not None and found.value is not None \
          else node
    if not isinstance(node, cst.Call):
      return None
    if node in self._rewritten:  # The graph rewrite: what it wraps.
      return self.optimizer_family(self._rewritten[node], scope)
    return self.families.get(node) or self.class_families.get(
        last_name(node.func) or "")

  def leave_Call(self, original_node: cst.Call) -> None:
    if last_name(original_node.func) in _FINITE_CHECKS:
      self._finite_checks -= 1

  def visit_Call(self, node: cst.Call) -> None:
    func = node.func
    names = self.names(func)
    self.called.update(names)
    if last_name(func) in _FINITE_CHECKS:
      self._finite_checks += 1
    if self._wraps_for_loss_scaling(node):
      self._factories.update(self._functions)
    callee = last_name(func)
    for function in self._functions:
      self._callees.setdefault(function, set()).add(callee or "")
    if node.args and any(n in table.GRAPH_REWRITE for n in names):
      self._rewritten[node] = node.args[0].value
    if any(n.startswith("keras.optimizers.") for n in names):
      self.families[node] = "keras"
    elif any(n.startswith(("tf.compat.v1.train.", "tf.train.")) and
             n.endswith("Optimizer") for n in names):
      self.families[node] = "v1"
    if any(n in table.FUNCTIONS and n.endswith(".Policy") for n in names):
      self.policy_calls.add(node)
    if any(n.endswith("global_policy") for n in names):
      self.global_policy_calls.add(node)
    if any(n.endswith("experimental.set_policy") for n in names) and \
        node.args:
      self.global_policies.append(node.args[0].value)
    if not isinstance(func, cst.Attribute):
      return
    attr = func.attr.value
    if attr == "compile" and not m.matches(func.value, m.Name("re")):
      self.has_compile = True
    elif attr == "build":
      self.built_after.add(code(func.value))
    elif attr == "apply_gradients" and node.args:
      pairs = node.args[0].value
      zipped = m.Call(func=m.Name("zip"), args=[m.Arg(), m.Arg()])
      if m.matches(pairs, zipped) and (isinstance(func.value, cst.Name) or (
          m.matches(func.value, m.Attribute(value=m.Name("self"))))):
        self.apply_vars.setdefault(
            code(func.value), code(pairs.args[1].value))  # type: ignore
      if m.matches(pairs, m.Call(func=m.Name("list") | m.Name("tuple"),
                                 args=[m.Arg()])):
        pairs = pairs.args[0].value  # type: ignore[attr-defined]
      if m.matches(pairs, zipped):
        self._applied.add(pairs.args[0].value)  # type: ignore[attr-defined]
    if _is_keras_lso(names) and node.args and isinstance(
        node.args[0].value, cst.Name):
      # What a Keras loss-scale optimizer wraps is a Keras optimizer.
      self.keras_wrapped.add((self.scope, node.args[0].value.value))

  def visit_If(self, node: cst.If) -> None:
    # `if not M.optimizer.built: ...`, inserted by an earlier --write.
    test = node.test
    if m.matches(test, m.UnaryOperation(
        operator=m.Not(), expression=m.Attribute(
            value=m.Attribute(value=m.Name(), attr=m.Name("optimizer")),
            attr=m.Name("built")))):
      self.built_guards.add(
          test.expression.value.value.value)  # type: ignore

  def lookup(self, scope: str, name: str) -> Optional[Assignment]:
    """`name`'s assignment seen from `scope` (its own, else the module's)."""
    return (self.assigned.get((scope, name)) or
            self.assigned.get(("<module>", name)))

  def kind_of(self, node: cst.BaseExpression, scope: str) -> str:
    """"optimizer", "policy", "config" or "other": what a receiver holds."""
    if isinstance(node, cst.Call):
      return "policy" if (node in self.global_policy_calls or
                          node in self.policy_calls) else "other"
    name = last_name(node)
    if name is None:
      return "other"
    kind = None
    if isinstance(node, cst.Name):
      found = self.lookup(scope, name)
      kind = found.kind if found else None
    elif m.matches(node, m.Attribute(value=m.Name("self"))):
      kind = self.self_attrs.get(name)
    if kind in ("optimizer", "lso"):
      return "optimizer"
    if kind == "policy" or name in ("dtype_policy", "_dtype_policy"):
      return "policy"
    if kind in (None, "other"):
      if _OPTIMIZER_WORD.search(name):
        return "optimizer"
      if _POLICY_WORD.search(name):
        return "policy"
      if _CONFIG_WORD.search(name):
        return "config"
    return "other"

  def unscaled_only_applied(self, call: cst.Call) -> bool:
    """Whether `get_unscaled_gradients`' result only reaches apply_gradients.

    Keras 3's `apply_gradients` unscales by itself: only then is dropping the
    call exact.
    """
    if call in self._applied:
      return True  # apply_gradients(zip(opt.get_unscaled_gradients(g), v))
    scope, line, name = self._unscaled.get(call, ("", 0, None))
    if name is None:
      return False
    later = [n for at, n in self._loads.get((scope, name), []) if at > line]
    return bool(later) and all(n in self._applied for n in later)

  def is_factory(self, scope: str) -> bool:
    """Whether `scope` is a function that returns a wrapped optimizer."""
    return scope.partition("@")[0] in self._factories

  def is_lso(self, node: cst.BaseExpression, scope: str) -> bool:
    """Whether `node` names a loss-scale optimizer this file assigned."""
    name = code(node)
    return any((where, name) in self.lso_names
               for where in (scope, "<module>")) or any(
                   site == name and where in (scope, "<module>")
                   for site, _, where in self.lso_sites)

  def _uses(self, value: cst.BaseExpression) -> Optional[list[cst.Name]]:
    """The later loads of the name `value` is bound to (None: not bound to
    one), and the loads of functions not binding it, wherever defined."""
    if value not in self._binds:
      return None
    scope, bound, line = self._binds[value]
    if bound.startswith("self."):
      return None  # An attribute: other methods, other files may use it.
    inside = set(m.findall(value, m.Name()))  # `opt = LSO(opt)`'s `opt`
    return [n for (where, name), loads in self._loads.items() if name == bound
            and (where == scope or (where, name) not in self.assigned)
            for at, n in loads if (at >= line or where != scope) and
            n not in inside]

  def policy_only_read(self, call: cst.Call) -> bool:
    """Whether the policy `call` makes is only read (`policy.loss_scale`,
    `policy.name`, ...): no `set_policy`, layer or `compile()` sees it."""
    uses = self._uses(call)
    return uses is not None and all(n in self._property_reads for n in uses)

  def unscales_nothing(self, call: cst.Call) -> bool:
    """Whether the optimizer `call` makes is seen applying and unscaling
    nothing: a local name only ever the receiver of methods, `apply_gradients`
    among them, no `get_unscaled_gradients`, `get_gradients` or `minimize`.

    TF 2.x's wrapper applied such gradients as given; Keras 3's divides them.
    """
    uses = self._uses(call)
    methods = {self._receivers.get(n) for n in uses or ()}
    return "apply_gradients" in methods and None not in methods and not {
        "get_unscaled_gradients", "get_gradients", "minimize"} & methods

  def policy_source(self, node: cst.BaseExpression, scope: str
                    ) -> Optional[cst.BaseExpression]:
    """The `Policy(...)` call or name string that made the policy `node`."""
    for _ in range(4):  # name -> global_policy() -> set_policy's argument
      if isinstance(node, cst.Name):
        found = self.lookup(scope, node.value)
        if found is None or found.kind != "policy" or found.value is None:
          return None
        node = found.value
      elif node in self.global_policy_calls:
        if len(self.global_policies) != 1:
          return None
        node = self.global_policies[0]
      elif isinstance(node, cst.SimpleString) or node in self.policy_calls:
        return node
      else:
        return None
    return None

  def policy_loss_scale(self, node: cst.BaseExpression, scope: str
                        ) -> LossScale:
    """The loss scale the policy `node` holds, if the file tells."""
    source = self.policy_source(node, scope)
    if isinstance(source, cst.SimpleString):
      return "default"
    return policy_call_loss_scale(source) if isinstance(
        source, cst.Call) else None

  def policy_is_float16(self, node: cst.BaseExpression, scope: str) -> bool:
    """Whether the policy `node` is known to be "mixed_float16"."""
    source = self.policy_source(node, scope)
    if isinstance(source, cst.SimpleString):
      return source.evaluated_value == "mixed_float16"
    return isinstance(source, cst.Call) and policy_name(
        source) == "mixed_float16"

  def self_models(self, scope: str, before: int) -> list[str]:
    """`self.M` attributes `scope` binds to a model before line `before`."""
    return [name for (where, name) in self.assigned
            if where == scope and name.startswith("self.") and
            self.is_model(name, scope, before)]

  def is_model(self, name: str, scope: str, before: int) -> bool:
    """Whether `name` holds a model assigned in `scope` before `before`."""
    found = self.assigned.get((scope, name))
    return found is not None and found.line < before and (
        found.kind == "model" or found.kind == "other" and
        _MODEL_WORD.search(name) is not None)


def policy_call_loss_scale(call: cst.Call) -> LossScale:
  """The `loss_scale` argument of a TF 2.3 `Policy(name, loss_scale)` call."""
  for i, arg in enumerate(call.args):
    if arg.keyword is not None and arg.keyword.value == "loss_scale" or (
        arg.keyword is None and i == 1):
      if isinstance(arg.value, cst.SimpleString) and \
          arg.value.evaluated_value == "auto":
        return "default"
      return arg.value
  return "default"


def policy_name(call: cst.Call) -> Optional[str]:
  """The literal policy name of a `Policy(...)` call, if it is one.

  Example:

  >>> policy_name(cst.parse_expression("Policy('mixed_float16', 128)"))
  'mixed_float16'
  """
  for i, arg in enumerate(call.args):
    if (arg.keyword is None and i == 0 or arg.keyword is not None and
        arg.keyword.value == "name") and isinstance(arg.value,
                                                    cst.SimpleString):
      value = arg.value.evaluated_value
      return value if isinstance(value, str) else None
  return None


def dynamic_arguments(call: cst.Call) -> Optional[dict[str, cst.Arg]]:
  """`DynamicLossScale(...)`'s arguments by name, or None if starred."""
  out = {}
  for i, arg in enumerate(call.args):
    if arg.star or arg.keyword is None and i >= len(_DYNAMIC_ARG_ORDER):
      return None
    out[arg.keyword.value if arg.keyword else _DYNAMIC_ARG_ORDER[i]] = arg
  return out
