"""``contextual_autotune`` around methods and in frameworks' hands (U15, 2026-12-04): over
``@classmethod``, pickled by reference (a spawned process's target, a Ray task), a bound method's
signature, a coroutine function. Plain host code here: what is checked is the wrapper, not the
inner kernels' tuning (tests/contextual/test_upstream_patterns.py)."""

from __future__ import annotations

import copy
import inspect
import pickle
from pathlib import Path

import pytest

from triton_dist.autotuner import ContextualAutoTuner, contextual_autotune


@pytest.fixture(autouse=True)
def in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@contextual_autotune()
def scale(x: float, alpha: float = 2.0) -> float:
    """Scale x."""
    return x * alpha


class Layer:
    factor = 3

    @contextual_autotune()
    def forward(self, x: float, bias: float = 0.0) -> float:
        return self.factor * x + bias

    @contextual_autotune()
    @classmethod
    def under(cls, x: float) -> float:
        return cls.factor * x

    @classmethod
    @contextual_autotune()
    def over(cls, x: float) -> float:
        return cls.factor * x


class Wider(Layer):
    factor = 30


def test_contextual_autotune_over_classmethod_binds_the_class() -> None:
    """Was "contextual_autotune decorates a callable, got <classmethod(...)>"."""
    assert Layer.under(1.0) == 3.0 and Layer().under(1.0) == 3.0 and Wider.under(1.0) == 30.0
    assert Layer.over(1.0) == 3.0 and Wider().over(1.0) == 30.0  # the other order, as before
    assert isinstance(Layer.__dict__["under"].__func__, ContextualAutoTuner)


def test_a_module_level_contextual_function_pickles_by_reference() -> None:
    """Pickling the tuner pickled its ``fn`` by the name the tuner holds: "Can't pickle <function
    scale>: it's not the same object as ...scale" (a spawned process's target, a Ray task)."""
    assert pickle.loads(pickle.dumps(scale)) is scale
    assert copy.deepcopy(scale) is scale and copy.copy(scale) is scale
    assert pickle.loads(pickle.dumps(Layer().forward))(1.0) == 3.0  # a bound method: getattr(obj, name)


def test_a_local_contextual_function_still_pickles_by_value_where_it_can() -> None:
    cloudpickle = pytest.importorskip("ray.cloudpickle", reason="Ray ships cloudpickle (not on the GPU machine)")

    @contextual_autotune(n_repeat=2)
    def local(x: float) -> float:
        return x + 1

    copied = cloudpickle.loads(cloudpickle.dumps(local))
    assert copied is not local and copied(1.0) == 2.0 and copied.n_repeat == 2


def test_a_bound_methods_signature_is_the_methods() -> None:
    """A bound method was ``functools.partial(self.__call__, obj)``: its signature read
    ``(*args, **kwargs) -> R``; ``copy.deepcopy`` of an object holding one kept the original."""
    layer = Layer()
    assert str(inspect.signature(layer.forward)) == "(x: 'float', bias: 'float' = 0.0) -> 'float'"
    assert layer.forward(2.0, bias=1.0) == 7.0 and layer.forward.__self__ is layer
    assert str(inspect.signature(scale)) == "(x: 'float', alpha: 'float' = 2.0) -> 'float'"
    assert scale.__doc__ == "Scale x." and scale.__name__ == "scale"
    held = copy.deepcopy({"op": layer.forward, "owner": layer})
    assert held["op"].__self__ is held["owner"]


async def async_host(x: float) -> float:
    return x


def test_a_coroutine_function_is_refused_with_the_fix() -> None:
    with pytest.raises(TypeError, match="coroutine function.*nothing.*synchronous function"):
        contextual_autotune()(async_host)




class Callable_:
    def __call__(self, x: float) -> float:
        return x


def test_a_contextual_callable_object_pickles_as_before() -> None:
    tuner = contextual_autotune()(Callable_())
    assert pickle.loads(pickle.dumps(tuner))(2.0) == 2.0
