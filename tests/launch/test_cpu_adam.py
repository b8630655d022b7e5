"""DeepSpeed's CPU Adam, the optimizer step of every recipe that offloads AdamW, builds here and steps as AdamW.

The op is C++ compiled by torch's JIT loader on first use (g++, ninja, the Python headers); the first GPU node of a
real run would otherwise be the first place it ever compiles. The build is cached in TORCH_EXTENSIONS_DIR
(tests/helpers: `.cache/torch-extensions` of the checkout), so the tier pays for it once: the first run of this
test on a checkout builds it, every later test and rehearsal launch loads it (the rehearsal of the offload
recipes, tests/preflight/test_rehearsal.py, then trains with it). Cost: see benchmarks/README.md.
"""

import pytest
import torch

pytestmark = pytest.mark.subprocess  # the build runs ninja and g++


def steps(optimizer_class, **kwargs) -> torch.Tensor:
    """The parameter after 3 steps of `optimizer_class` on fixed gradients."""
    torch.manual_seed(0)
    param = torch.nn.Parameter(torch.randn(4096))
    optimizer = optimizer_class([param], lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, **kwargs)
    for _ in range(3):
        param.grad = torch.randn(4096)
        optimizer.step()
    return param.detach()


def test_deepspeed_cpu_adam_builds_and_steps_as_torch_adamw():
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    torch.manual_seed(0)
    start = torch.randn(4096)  # the parameter's initial value in `steps`
    reference = steps(torch.optim.AdamW)
    built = steps(DeepSpeedCPUAdam, adamw_mode=True)  # what DeepSpeed builds for `"type": "AdamW"` offloaded
    assert not torch.equal(built, start)
    torch.testing.assert_close(built, reference, rtol=1e-6, atol=1e-7)
    # negative control: Adam with L2 weight decay (adamw_mode=False) is another update, and the tolerance sees it
    assert not torch.allclose(steps(DeepSpeedCPUAdam, adamw_mode=False), reference, rtol=1e-6, atol=1e-7)
