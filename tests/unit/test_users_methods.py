"""Tuned methods, signatures and wrappers as framework code writes them (U15, 2026-12-04): what
once bound the wrong object, showed IDEs and frameworks a signature the call does not take, kept
every module instance alive, or kept a cache entry after its kernel changed."""

from __future__ import annotations

import copy
import functools
import inspect
import pickle
import pydoc
from typing import Any

import pytest
import torch

from triton_dist.errors import DuplicateArgumentError, KeyFunctionError
from triton_dist.tune import AutoTuner, autotune, to_hashable


@pytest.fixture(autouse=True)
def _on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_DIST_DEVICE", "cpu")


def flat(fn: Any, w: int, r: int) -> list[float]:
    fn()
    return [1.0] * r


SPACE = [{"c": 2}, {"c": 3}]


# ------------------------------------------------------------------ staticmethod, classmethod

class Static:
    factor = 10

    @autotune(SPACE, key_fn=lambda x, *a, **k: (x,), do_bench=flat)
    @staticmethod
    def under(x: int, c: int) -> int:
        return x * c

    @staticmethod
    @autotune(SPACE, key_fn=lambda x, *a, **k: (x,), do_bench=flat)
    def over(x: int, c: int) -> int:
        return x * c


class Class:
    factor = 10

    @autotune(SPACE, key_fn=lambda cls, x, *a, **k: (cls.__name__, x), do_bench=flat)
    @classmethod
    def under(cls, x: int, c: int) -> int:
        return cls.factor * x * c

    @classmethod
    @autotune(SPACE, key_fn=lambda cls, x, *a, **k: (cls.__name__, x), do_bench=flat)
    def over(cls, x: int, c: int) -> int:
        return cls.factor * x * c


class SubClass(Class):
    factor = 100


def test_autotune_over_staticmethod_is_a_staticmethod(cache_dir: Any) -> None:
    """``@autotune`` over ``@staticmethod``: the face was a plain function in the class, so an
    instance bound itself as the first argument (a DuplicateArgumentError about positional
    arguments the caller never passed)."""
    assert Static.under(5) == 10 and Static().under(5) == 10 and Static().under(x=5) == 10
    assert isinstance(Static.under, AutoTuner) and Static.under.__name__ == "under"
    assert Static.over(5) == 10 and Static().over(5) == 10  # the other order: as it always was
    assert Static.under.best_config(5) == {"c": 2}
    assert pickle.loads(pickle.dumps(Static.under)) is Static.under  # by reference, as Ray sends it


def test_autotune_over_classmethod_binds_the_class(cache_dir: Any) -> None:
    """``@autotune`` over ``@classmethod`` was "autotune decorates a callable, got classmethod"."""
    assert Class.under(1) == 20 and Class().under(1) == 20
    assert SubClass.under(1) == 200 and SubClass().under(1) == 200  # cls is the class called through
    assert Class.over(1) == 20 and SubClass().over(1) == 200
    assert Class.under.tuner is Class.__dict__["under"].__func__.tuner
    assert Class.under.best_config(Class, 1) == {"c": 2}  # key_fn gets cls, as the function does
    assert pickle.loads(pickle.dumps(SubClass.under)) == SubClass.under  # a bound method: getattr(cls, name)


def test_a_classmethod_given_to_autotuner_directly_names_the_fix() -> None:
    with pytest.raises(TypeError, match=r"classmethod.*@autotune\(\.\.\.\) above @classmethod"):
        AutoTuner(classmethod(lambda cls, x, c: x), SPACE, key_fn=lambda *a, **k: 1)


def host(x: int, c: int) -> int:
    return x * c


tuned_host = autotune(SPACE, key_fn=lambda x, *a, **k: (x,), do_bench=flat)(host)


class HoldsIt:
    op = tuned_host  # a function in a class body: a method, as any function there is


def test_a_tuned_function_as_a_class_attribute_binds_like_a_function(cache_dir: Any) -> None:
    """Judged correct as is: a face is a function, and a function stored in a class binds the
    instance when read through one (so would ``host`` itself); ``staticmethod(tuned)`` does not."""
    assert HoldsIt.op(5) == 10  # through the class: the function
    with pytest.raises(DuplicateArgumentError, match="2 positional"):
        HoldsIt().op(5)  # host(instance, 5): c filled twice, as host would get x=instance, c=5

    class Kept:
        op = staticmethod(tuned_host)

    assert Kept().op(5) == 10


# ------------------------------------------------------------------ instances, nn.Module

class Scale(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.full((n,), 2.0))

    @autotune(SPACE, key_fn=lambda self, x, *a, **k: (self.weight.shape[0], to_hashable(x)), do_bench=flat)
    def forward(self, x: torch.Tensor, c: int) -> torch.Tensor:
        return x * self.weight * c


def test_instances_share_the_methods_tuner_and_the_key_tells_them_apart(cache_dir: Any) -> None:
    """Judged correct as is: a method decorated in the class has one tuner for all instances (the
    function is one); what in ``self`` decides the config belongs in the key, which ``key_fn``
    receives as the function does. Two instances of one size share a decision, two sizes not."""
    a, b, wide = Scale(4), Scale(4), Scale(8)
    x4, x8 = torch.ones(4), torch.ones(8)
    assert torch.equal(a(x4), torch.full((4,), 4.0)) and torch.equal(wide(x8), torch.full((8,), 4.0))
    tuner = Scale.forward.tuner
    assert len(tuner._best) == 2 and b.forward.tuner is tuner
    # the face's methods are the tuner's, not bound through the instance: they take the
    # function's arguments, self included (a method's attribute is its function's)
    assert Scale.forward.best_config(b, x4) == {"c": 2} and b.forward.best_config(b, x4) == {"c": 2}
    assert a.forward.__self__ is a and isinstance(Scale.forward, AutoTuner)


def test_a_deep_copied_or_pickled_module_calls_its_own_forward(cache_dir: Any) -> None:
    """Judged correct as is: the tuner is the class's; a copy of a module (``copy.deepcopy``,
    pickle) carries its own parameters and its forward reads them."""
    module = Scale(4)
    x = torch.ones(4)
    module(x)
    twin = copy.deepcopy(module)
    with torch.no_grad():
        twin.weight.fill_(5.0)
    assert torch.equal(twin(x), torch.full((4,), 10.0)) and torch.equal(module(x), torch.full((4,), 4.0))
    again = pickle.loads(pickle.dumps(module))
    assert torch.equal(again(x), torch.full((4,), 4.0)) and type(again).forward is Scale.forward


class Upstream(torch.nn.Module):
    """A forward keyed the way upstream's kernels key their functions: to_hashable of the first
    two arguments, which for a method are ``self`` and ``x``."""

    @autotune(SPACE, key_fn=lambda A, B, *a, **k: (to_hashable(A), to_hashable(B)), do_bench=flat)
    def forward(self, x: torch.Tensor, c: int) -> torch.Tensor:
        return x * c


def test_a_key_holding_a_module_is_refused_with_the_fix(cache_dir: Any) -> None:
    """A key holding the module (``to_hashable(self)`` is ``self``): each instance tuned anew and
    was kept alive by the tuner's decisions for good (its parameters with it), while on disk every
    instance that prints alike (``Upstream()``) named one entry."""
    with pytest.raises(KeyFunctionError, match=r"torch\.nn\.Module.*self.*key_fn=lambda self, x"):
        Upstream()(torch.ones(4))
    assert Upstream.forward.tuner._best == {}


# ------------------------------------------------------------------ signature, help, wrappers

def scaled(x: torch.Tensor, alpha: float, cfg: int, beta: float = 1.0, *, out: Any = None) -> torch.Tensor:
    """Scale x by alpha."""
    return x * alpha


tuned_scaled = autotune([{"cfg": 1}, {"cfg": 2}], key_fn=lambda x, *a, **k: (to_hashable(x),),
                        do_bench=flat)(scaled)


def test_the_signature_is_the_calls_without_the_config_fields_and_with_the_controls() -> None:
    """``inspect.signature(face)`` was the host function's, config fields included: frameworks
    that check a call against it (Ray's ``.remote()``, ``Signature.bind``) refused
    ``tuned(x, 2.0)`` for a missing ``cfg``, which the tuner fills and a caller may not pass.
    Parameters after a field are keyword-only (positionally they would fill the field)."""
    signature = inspect.signature(tuned_scaled)
    assert list(signature.parameters) == ["x", "alpha", "beta", "out", "autotune", "autotune_verbose",
                                          "autotune_allow_arg_overwrite", "autotune_pg"]
    kinds = {name: p.kind for name, p in signature.parameters.items()}
    assert kinds["alpha"] is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert kinds["beta"] is kinds["autotune_pg"] is inspect.Parameter.KEYWORD_ONLY
    assert signature.parameters["autotune"].default is True
    signature.bind(torch.ones(2), 2.0)
    signature.bind(torch.ones(2), 2.0, beta=3.0, autotune_pg=None)
    with pytest.raises(TypeError):
        signature.bind(torch.ones(2), 2.0, 1)  # would fill cfg
    assert inspect.signature(tuned_scaled.tuner) == signature
    assert inspect.signature(functools.partial(tuned_scaled, alpha=3.0)).parameters["alpha"].default == 3.0
    assert str(inspect.signature(scaled)).startswith("(x: 'torch.Tensor', alpha: 'float', cfg: 'int'")


def test_the_type_hints_are_the_calls_and_the_host_functions_stay_whole() -> None:
    """``typing.get_type_hints(face)`` listed the config fields (``functools.update_wrapper``
    gave the face the host function's own annotations dict)."""
    import typing

    hints = typing.get_type_hints(tuned_scaled)
    assert "cfg" not in hints and hints["x"] is torch.Tensor and hints["alpha"] is float
    assert set(hints) <= set(inspect.signature(tuned_scaled).parameters) | {"return"}
    assert "cfg" in typing.get_type_hints(scaled) and tuned_scaled.__annotations__ is not scaled.__annotations__



@pytest.mark.parametrize(("host", "shown"), [
    (lambda x, **kw: x, "(x, *, {controls}, **kw)"),
    (lambda x, c, *rest, d=1: x, "(x, *, d=1, {controls})"),  # *rest: every extra would fill c
    (lambda x, /, y, c=2, z=3: x, "(x, /, y, *, z=3, {controls})"),
    (lambda x, c, autotune_pg=None: x, "(x, *, {controls})"),  # a control keyword is the tuner's
], ids=["kwargs", "varargs-after-a-field", "positional-only", "a-control-named-parameter"])
def test_the_signature_of_other_parameter_lists(host: Any, shown: str) -> None:
    controls = "autotune=True, autotune_verbose=False, autotune_allow_arg_overwrite=False, autotune_pg=None"
    tuned = autotune([{"c": 1}], key_fn=lambda *a, **k: 1)(host)
    assert str(inspect.signature(tuned)) == shown.format(controls=controls)


def test_stacked_tuners_show_the_outer_call() -> None:
    inner = autotune([{"c": 1}, {"c": 2}], key_fn=lambda *a, **k: 1, do_bench=flat)(lambda x, c, d: x * c * d)
    outer = autotune([{"d": 1}, {"d": 3}], key_fn=lambda *a, **k: 1, do_bench=flat)(inner)
    assert list(inspect.signature(inner).parameters)[:2] == ["x", "d"]
    assert list(inspect.signature(outer).parameters)[:2] == ["x", "autotune"]


def test_rays_argument_check_takes_a_tuned_call() -> None:
    """What Ray's ``.remote()`` does before it sends a call: it failed with "missing a required
    argument: 'cfg'"."""
    ray_signature = pytest.importorskip("ray._common.signature", reason="Ray (2.60) is not installed here")
    checked = ray_signature.extract_signature(tuned_scaled)
    ray_signature.flatten_args(checked, [torch.ones(2), 2.0], {"autotune_verbose": True})


def test_help_and_the_function_attributes_read_as_the_host_functions() -> None:
    """Judged correct as is (the signature aside): name, qualified name, module, docstring and
    ``__wrapped__`` are the host function's; ``help()`` shows the call's signature."""
    assert (tuned_scaled.__name__, tuned_scaled.__qualname__, tuned_scaled.__module__) == (
        "scaled", "scaled", __name__)
    assert tuned_scaled.__doc__ == "Scale x by alpha." and tuned_scaled.__wrapped__ is scaled
    assert inspect.unwrap(tuned_scaled) is scaled
    text = pydoc.render_doc(tuned_scaled, renderer=pydoc.plaintext)
    assert "scaled(x: 'torch.Tensor', alpha: 'float', *, beta: 'float' = 1.0" in text and "Scale x by alpha." in text


def test_a_partial_of_a_face_calls_and_tunes_like_the_face(cache_dir: Any) -> None:
    """Judged correct as is: a business keyword fixed by ``functools.partial`` reaches the function;
    a config field fixed by it is the usual duplicate, and the controls pass through."""
    triple = functools.partial(tuned_scaled, alpha=3.0)
    assert torch.equal(triple(torch.ones(2)), torch.full((2,), 3.0))
    assert tuned_scaled.best_config(torch.ones(2)) is not None
    assert torch.equal(functools.partial(tuned_scaled, autotune=False)(torch.ones(3), 2.0), torch.full((3,), 2.0))
    with pytest.raises(DuplicateArgumentError, match="cfg"):
        functools.partial(tuned_scaled, cfg=1)(torch.ones(2), 1.0)


def logged(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        wrapper.calls += 1  # type: ignore[attr-defined]
        return fn(*args, **kwargs)

    wrapper.calls = 0  # type: ignore[attr-defined]
    return wrapper


def test_a_wraps_decorator_around_a_face_keeps_its_attributes(cache_dir: Any) -> None:
    """Judged correct as is: ``functools.wraps`` copies the face's ``__dict__`` (tuner, tune,
    best_config, its signature) onto the wrapper, which then is an AutoTuner for isinstance and
    whose methods act on the one tuner."""
    outer = logged(autotune(SPACE, key_fn=lambda x, *a, **k: (x,), do_bench=flat)(host))
    assert outer(5) == 10 and outer.calls == 1 and isinstance(outer, AutoTuner)
    assert outer.best_config(5) == {"c": 2} and outer.tuner.face is outer.__wrapped__
    assert list(inspect.signature(outer).parameters)[:1] == ["x"] and "c" not in inspect.signature(outer).parameters


def test_a_wraps_decorator_under_autotune_tunes_through_it(cache_dir: Any) -> None:
    """A ``functools.wraps`` decorator under ``@autotune``: the config reaches the host function
    through the wrapper, the signature is the host function's call's."""
    inner = autotune(SPACE, key_fn=lambda x, *a, **k: (x,), do_bench=flat)(logged(host))
    assert inner(5) == 10 and inner.fn.calls >= 1 and list(inspect.signature(inner).parameters)[0] == "x"
    assert "c" not in inspect.signature(inner).parameters


# ------------------------------------------------------------------ a bound method decorated

class PerInstance(torch.nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor
        self.op = autotune(SPACE, key_fn=lambda x, *a, **k: (to_hashable(x),), do_bench=flat)(self._impl)

    def _impl(self, x: torch.Tensor, c: int) -> torch.Tensor:
        return self.factor * x * c


def test_decorating_one_instances_bound_method_warns_of_its_copies(cache_dir: Any) -> None:
    """``self.op = autotune(...)(self._impl)``: the face is a function, which ``copy.deepcopy``
    keeps as it is (functions are atomic to it), so a deep copy of the module (an EMA or teacher
    copy) called the original's method, with the original's state, without a word; pickle refused
    it in pickle's terms. Decorating warns with the fix; the face still works for its instance."""
    with pytest.warns(Warning, match=r"PerInstance\._impl.*one PerInstance.*copy\.deepcopy.*class body"):
        module = PerInstance(10.0)
    assert torch.equal(module.op(torch.ones(2)), torch.full((2,), 20.0))
    twin = copy.deepcopy(module)
    twin.factor = 100.0
    assert torch.equal(twin.op(torch.ones(2)), torch.full((2,), 20.0))  # what the warning says


def test_a_bound_method_of_a_class_does_not_warn(cache_dir: Any, recwarn: Any) -> None:
    tuned = autotune(SPACE, key_fn=lambda cls, x, *a, **k: (x,), do_bench=flat)(Class.under.__func__.fn)
    assert tuned(Class, 1) == 20 and not [w for w in recwarn if "deepcopy" in str(w.message)]
    bound_to_class = autotune(SPACE, key_fn=lambda x, *a, **k: (x,), do_bench=flat)(
        classmethod(lambda cls, x, c: x * c).__get__(None, Class))
    assert bound_to_class(2) == 4 and not [w for w in recwarn if "deepcopy" in str(w.message)]


def test_cloudpickle_copies_a_modules_bound_method_tuner_with_the_module(cache_dir: Any) -> None:
    """cloudpickle (Ray's) copies the face by value with the module it is bound to: the copy's
    tuner is rebuilt around the half-built copy, whose ``repr`` (read eagerly as a default name)
    raised "'PerInstance' object has no attribute '_modules'"."""
    cloudpickle = pytest.importorskip("ray.cloudpickle", reason="Ray ships cloudpickle (not on the GPU machine)")
    with pytest.warns(Warning, match="copy.deepcopy"):
        module = PerInstance(10.0)
    module.op(torch.ones(2))
    copied = cloudpickle.loads(cloudpickle.dumps(module))
    copied.factor = 100.0
    assert copied.op.fn.__self__ is copied and torch.equal(copied.op(torch.ones(2)), torch.full((2,), 200.0))
    assert copied.op.best_config(torch.ones(2)) == {"c": 2}  # the decision came along


# ------------------------------------------------------------------ coroutine and generator functions

async def async_host(x: int, c: int) -> int:
    return x * c


def generator_host(x: int, c: int) -> Any:
    yield x * c


@pytest.mark.parametrize(("host", "kind"), [(async_host, "coroutine function"),
                                            (generator_host, "generator function")],
                         ids=["async-def", "generator"])
def test_a_host_function_whose_call_runs_nothing_is_refused_with_the_fix(host: Any, kind: str) -> None:
    """An ``async def`` (or generator) host function: its call returns a coroutine that runs
    nothing until awaited, so every candidate timed the making of one, a config was picked at
    random and written as the key's entry, and Python warned "coroutine ... was never awaited"
    for each run. (An async framework calls a synchronous host function from its coroutine.)"""
    with pytest.raises(TypeError, match=f"{kind}.*nothing.*synchronous function"):
        autotune(SPACE, key_fn=lambda x, *a, **k: (x,), do_bench=flat)(host)



def test_a_synchronous_wrapper_that_runs_a_coroutine_is_tuned(cache_dir: Any) -> None:
    import asyncio

    def run(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return asyncio.run(fn(*args, **kwargs))
        return wrapper

    assert autotune(SPACE, key_fn=lambda x, *a, **k: (x,), do_bench=flat)(run(async_host))(5) == 10
