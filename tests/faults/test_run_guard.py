"""The run guard on one process, held to its behaviour without starting a process (docs/reliability.md); the real
launches are tests/faults/test_faults_launch.py.

- a preemption signal only sets the request, and the request makes the step end save and stop;
- a NaN loss or gradient norm stops the run naming step, rank and last good checkpoint, or is skipped and counted
  where the optimizer discarded the update.
"""

import os
import signal
from types import SimpleNamespace

import pytest
import torch
from transformers import TrainerControl, TrainerState

from longctx.training.faults.run_guard import NonFiniteStop, RunGuard
from longctx.training.faults.signals import PreemptionRequest
from tests.helpers.checkpoints.checkpoint_folders import checkpoint

pytestmark = pytest.mark.faults


# ---- the run guard (preemption and non-finite numbers), on one process


class Accelerator:
    num_processes, process_index, device, is_main_process = 1, 0, torch.device("cpu"), True

    def __init__(self):
        self.lines = []

    def print(self, *args):
        self.lines.append(" ".join(map(str, args)))


class Engine:
    def __init__(self, norm):
        self.norm = norm

    def get_global_grad_norm(self):
        return self.norm


def guard_at(tmp_path, step=2, policy="stop", norm=1.0, asked=None):
    trainer = SimpleNamespace(accelerator=Accelerator(), model_wrapped=Engine(norm))
    preemption = PreemptionRequest()
    preemption.signal_name = asked
    guard = RunGuard(trainer, policy, preemption)
    args = SimpleNamespace(output_dir=str(tmp_path))
    return guard, args, TrainerState(global_step=step, max_steps=6), TrainerControl()


def test_a_preemption_request_saves_and_stops_at_the_step_end(tmp_path):
    guard, args, state, control = guard_at(tmp_path, asked="SIGUSR1")
    guard.on_step_end(args, state, control)
    assert control.should_save and control.should_training_stop and guard.preempted_at == 2
    guard, args, state, control = guard_at(tmp_path)
    guard.on_step_end(args, state, control)
    assert not control.should_save and not control.should_training_stop and guard.preempted_at is None


def test_a_signal_only_sets_the_request(tmp_path):
    request = PreemptionRequest()
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        request.install()
        os.kill(os.getpid(), signal.SIGUSR1)  # this process survives: Python's default would end it
        assert request.signal_name == "SIGUSR1" and request.requested
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def test_a_nan_loss_stops_the_run_naming_step_rank_and_last_good_checkpoint(tmp_path):
    checkpoint(tmp_path, 1)
    guard, args, state, control = guard_at(tmp_path)
    guard.see_loss(torch.tensor(2.0))
    guard.see_loss(torch.tensor(float("nan")))  # a later micro-batch of the same step
    with pytest.raises(NonFiniteStop) as stop:
        guard.on_step_end(args, state, control)
    said = str(stop.value)
    assert said.startswith("step 2: the loss is NaN or Inf on rank(s) 0. The run stops at this step")
    assert f"last good checkpoint: {tmp_path}/checkpoint-1 (`--resume_from_checkpoint auto` resumes it)" in said


def test_an_infinite_gradient_norm_stops_the_run_too(tmp_path):
    guard, args, state, control = guard_at(tmp_path, norm=float("inf"))
    guard.see_loss(torch.tensor(2.0))
    with pytest.raises(NonFiniteStop, match=r"step 2: the gradient norm is inf.*last good checkpoint: none"):
        guard.on_step_end(args, state, control)


def test_skip_goes_on_only_where_the_optimizer_discarded_the_update(tmp_path):
    guard, args, state, control = guard_at(tmp_path, policy="skip", norm=float("inf"))
    guard.see_loss(torch.tensor(float("nan")))
    guard.on_step_end(args, state, control, optimizer=SimpleNamespace(step_was_skipped=True))
    assert guard.skipped == 1 and "its update was discarded (on_nonfinite: skip)" in guard.trainer.accelerator.lines[0]
    logs = {"loss": 1.0}
    state.log_history.append({**logs, "step": state.global_step})  # what Trainer.log does before on_log
    guard.on_log(args, state, control, logs=logs)
    assert logs["nonfinite_skipped"] == 1 and state.log_history[-1]["nonfinite_skipped"] == 1
    guard.see_loss(torch.tensor(float("nan")))
    with pytest.raises(NonFiniteStop, match="the optimizer applied the update"):
        guard.on_step_end(args, state, control, optimizer=SimpleNamespace(step_was_skipped=False))
