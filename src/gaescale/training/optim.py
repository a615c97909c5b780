"""Adam for the trainer, without ``torch.optim``'s import of ``torch._dynamo``.

``torch.optim.Optimizer``'s methods (``__init__``, ``zero_grad``, ``step``, ``state_dict``) import ``torch._dynamo``
on their first call, so that a compiled model can step through them. gaescale compiles nothing, and that import
costs every training process about 1.4 s and 140 MiB of resident memory on these machines (75 MiB anonymous, 65 of
mapped libraries): as much as ``import torch`` itself, 9 % of the 770,000-node demo's peak. :class:`Adam` computes
exactly what ``torch.optim.Adam`` computes with its defaults on the CPU (its single-tensor update, amsgrad, weight
decay and maximize off) and reads and writes its ``state_dict`` format, so checkpoints pass between the two.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import torch

# torch.optim.Adam's options and defaults, kept in every group as it keeps them (its state_dict carries them);
# those set in UNSUPPORTED are refused
DEFAULTS = {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "amsgrad": False, "maximize": False,
            "foreach": None, "capturable": False, "differentiable": False, "fused": None,
            "decoupled_weight_decay": False}
UNSUPPORTED = ("weight_decay", "amsgrad", "maximize", "capturable", "differentiable", "fused",
               "decoupled_weight_decay")


class Adam:
    """Adam (Kingma & Ba) over ``params``: tensors, or groups ``{"params": [...], "lr": ...}`` as torch's optimizers
    take them (a group without ``lr`` takes ``lr``). The moments are kept per parameter in ``state[p]``
    (``step``, ``exp_avg``, ``exp_avg_sq``), created at its first gradient."""

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        groups = list(params)
        if not groups:
            raise ValueError("The 'params' parameter of Adam must hold at least one tensor. Got an empty list instead.")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        self.defaults = {"lr": lr, **DEFAULTS, "betas": tuple(betas), "eps": eps}
        self.param_groups = [{**self.defaults, **group, "params": list(group["params"])} for group in groups]
        self.state: defaultdict[torch.Tensor, dict] = defaultdict(dict)
        for group in self.param_groups:
            _check_supported(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_().zero_()

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter that has a gradient, as ``torch.optim.Adam``'s single-tensor path."""
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps = group["lr"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                grad, exp_avg, exp_avg_sq = p.grad, state["exp_avg"], state["exp_avg_sq"]
                state["step"] += 1
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                step = state["step"].item()
                step_size = lr / (1 - beta1 ** step)
                denom = (exp_avg_sq.sqrt() / (1 - beta2 ** step) ** 0.5).add_(eps)
                p.addcdiv_(exp_avg, denom, value=-step_size)

    def state_dict(self) -> dict:
        """``{"state": {index: {...}}, "param_groups": [{..., "params": [index, ...]}]}``, parameters numbered in the
        order of the groups: ``torch.optim.Adam``'s format."""
        index: dict[int, int] = {}
        groups = [{**{k: v for k, v in g.items() if k != "params"},
                   "params": [index.setdefault(id(p), len(index)) for p in g["params"]]} for g in self.param_groups]
        return {"state": {index[id(p)]: s for p, s in self.state.items()}, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """The state of :meth:`state_dict` (or of ``torch.optim.Adam``'s) for the same groups of parameters: the moments
        moved to each parameter's device and dtype, the groups' options (``lr``, ``betas``, ...) taken."""
        groups = state_dict["param_groups"]
        if [len(g["params"]) for g in groups] != [len(g["params"]) for g in self.param_groups]:
            raise ValueError("The 'state_dict' parameter of Adam.load_state_dict must have as many groups and "
                             f"parameters per group as the optimizer ({[len(g['params']) for g in self.param_groups]})"
                             f". Got {[len(g['params']) for g in groups]} instead.")
        for group in groups:
            _check_supported(group)
        owner = {i: p for saved, own in zip(groups, self.param_groups) for i, p in zip(saved["params"], own["params"])}
        self.state = defaultdict(dict)
        for i, state in state_dict["state"].items():
            p = owner[i]
            self.state[p] = {k: v if k == "step" or not isinstance(v, torch.Tensor) else v.to(p.device, p.dtype)
                             for k, v in state.items()}
        for saved, own in zip(groups, self.param_groups):
            own.update({k: v for k, v in saved.items() if k != "params"})


def _check_supported(group: dict) -> None:
    for key in UNSUPPORTED:
        if group.get(key, DEFAULTS[key]) != DEFAULTS[key]:
            raise ValueError(f"The '{key}' option of gaescale's Adam must be {DEFAULTS[key]!r} (not implemented). "
                             f"Got {group[key]!r} instead.")
