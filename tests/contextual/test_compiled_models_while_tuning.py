"""``torch.compile``'d models called inside a ``contextual_autotune``'d outer function whose call
tunes, as users write them: the compiled model before or after the inner kernel, a new key (a new
call that tunes) several times. Real Triton kernels under the interpreter on the CPU.

In a call that tunes, the side-effect watch (``_contextual/side_effects.py``) registers a global
module forward pre-hook and optimizer step hook. TorchDynamo traced that hook: a compiled model of
nested modules failed the user's call ("... is already tracked for mutation", an AssertionError
out of Dynamo), a compiled model's graph broke at every submodule (``threading.get_ident``), every
call that tuned registered the hooks under new ids, which Dynamo's guards compare (a recompile of
the model per call, up to Dynamo's recompile limit), and torch warned at each call of the
compiled model of "global hooks on modules" (an error under ``-W error``).
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
import torch
import triton
from torch._dynamo.testing import CompileCounterWithBackend
from torch._dynamo.utils import counters

from tests.contextual import _kernels as K
from triton_dist.autotuner import contextual_autotune
from triton_dist.errors import TritonDistWarning

BACKENDS = ["eager", "aot_eager", pytest.param("inductor", marks=[
    pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None,
                       reason="inductor needs a C++ compiler"),
    pytest.mark.filterwarnings("ignore:.*torch.jit.script_method.*:DeprecationWarning")])]


@pytest.fixture(autouse=True)
def fresh_dynamo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)  # the tuning log goes to ./.autotune_logs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch._dynamo.reset()
    counters.clear()
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch._dynamo.reset()


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.lin, self.act = torch.nn.LayerNorm(8), torch.nn.Linear(8, 8), torch.nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.lin(self.norm(x)))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(Block(), Block())
        self.head = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))


def outer_around(model, kernel_first: bool):
    scale = K.make_scale((16, 32))

    def run(x: torch.Tensor) -> torch.Tensor:
        def launch(t: torch.Tensor) -> torch.Tensor:
            y, n = torch.empty_like(t), t.numel()
            scale[lambda m: (triton.cdiv(n, m["BLOCK"]),)](t, y, 2.0, n)
            return y
        return model(launch(x)) if kernel_first else launch(model(x))

    return contextual_autotune(n_repeat=1, n_warmup=0)(run), scale


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kernel_first", [True, False], ids=["compiled-in-a-run-that-tunes", "compiled-first"])
def test_a_compiled_model_in_calls_that_tune_compiles_once_without_breaks(backend: str, kernel_first: bool) -> None:
    torch.manual_seed(0)
    net = Net()
    counter = CompileCounterWithBackend(backend)
    tuned, scale = outer_around(torch.compile(net, backend=counter, dynamic=True), kernel_first)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # was: torch's "global hooks on modules" UserWarning
        warnings.simplefilter("ignore", DeprecationWarning)  # torch's own, of its modules
        warnings.filterwarnings("ignore", "contextual tuning of .* logs to", TritonDistWarning)
        x = torch.randn(3, 8)
        expected = net(2.0 * x) if kernel_first else 2.0 * net(x)
        torch.testing.assert_close(tuned(x), expected)  # was: AssertionError out of Dynamo
        assert scale.cache, "the inner kernel was not tuned"
        torch.testing.assert_close(tuned(x), expected)  # every kernel cached: no hooks
        frames = counter.frame_count
        with torch.compiler.set_stance("fail_on_recompile"):  # was: a recompile per call that tunes
            for rows in range(4, 12):  # new keys: calls that tune, then a cached call each
                x = torch.randn(rows, 8)
                expected = net(2.0 * x) if kernel_first else 2.0 * net(x)
                torch.testing.assert_close(tuned(x), expected)
                torch.testing.assert_close(tuned(x), expected)
    assert len(scale.cache) == 9
    assert counter.frame_count == frames  # nothing compiled again in calls that tune
    assert not counters["graph_break"], dict(counters["graph_break"])


def test_a_training_step_of_a_compiled_model_is_still_named() -> None:
    """Modules called inside compiled code are not watched, the optimizer's step still is."""
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    model = torch.compile(net, backend="eager")

    def train(x: torch.Tensor) -> torch.Tensor:
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    tuned, scale = outer_around(train, kernel_first=True)
    with pytest.warns(TritonDistWarning, match=r"SGD\.step\(\) ran"):
        tuned(torch.randn(3, 8))
    assert scale.cache
