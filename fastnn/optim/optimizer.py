"""Optimizer base: parameter groups, per-parameter state, state_dict, like torch.optim.

Each ``step()`` updates every parameter that has a gradient with ONE fused kernel call
(``sgd_step`` / ``adam_step`` / ``adamw_step`` of the backend the arrays live on: the
compiled cpu backend by default, the NumPy reference under ``use_backend("reference")``).
The kernels update the parameter and its state arrays in place and return None; this
class is their Python shell: it validates once (shapes, dtypes, contiguity) and keeps
the state.  Parameters whose ``grad`` is None (or with ``requires_grad=False``) are
skipped, as torch skips them.
"""
import copy
import math

import numpy as np

from .._backend import dispatch
from .._validate import F32, F64, float_array, is_device, real
from ..nn.module import Parameter

__all__ = ["Optimizer", "required"]


class _Required:
    def __repr__(self):
        return "<required parameter>"


required = _Required()


def check_nonneg(value, name):
    """A real number >= 0 (ValueError otherwise, as torch's 'Invalid ... value')."""
    v = real(value, name)
    if not v >= 0.0 or math.isnan(v):
        raise ValueError(f"Invalid {name}: {value} (must be >= 0)")
    return v


class Optimizer:
    """Base class: ``params`` is an iterable of Parameters or of dicts (parameter groups,
    each with a ``"params"`` entry and optional per-group hyperparameters)."""

    def __init__(self, params, defaults):
        self.defaults = dict(defaults)
        self.state = {}
        self.param_groups = []
        if isinstance(params, Parameter):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            "Parameters or dicts, but got a single Parameter (wrap it in a list)")
        if isinstance(params, dict):
            params = [params]
        try:
            groups = list(params)
        except TypeError:
            raise TypeError(f"params must be an iterable of Parameters or dicts, got "
                            f"{type(params).__name__}") from None
        if len(groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    # ------------------------------------------------------------------ groups
    def add_param_group(self, param_group):
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        group = dict(param_group)
        if "params" not in group:
            raise ValueError("param_group must have a 'params' entry")
        params = group["params"]
        if isinstance(params, Parameter):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of sets changes between runs; use a list")
        params = list(params)
        for i, p in enumerate(params):
            if not isinstance(p, Parameter):
                raise TypeError(f"optimizer can only optimize fastnn Parameters, but param {i} "
                                f"of the group is a {type(p).__name__}")
        if len({id(p) for p in params}) != len(params):
            raise ValueError("a parameter group contains the same parameter more than once")
        group["params"] = params
        for name, default in self.defaults.items():
            if default is required and name not in group:
                raise ValueError(f"parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            group.setdefault(name, default)
        self._check_group(group)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    def _check_group(self, group):
        """Validate a group's hyperparameters (subclasses extend)."""
        group["lr"] = check_nonneg(group["lr"], "learning rate")

    # ------------------------------------------------------------------ stepping
    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                p.zero_grad(set_to_none)

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()
        for group in self.param_groups:
            if not group["lr"] >= 0:
                raise ValueError(f"Invalid learning rate: {group['lr']} (must be >= 0)")
            self._step_group(group)
        return loss

    def _step_group(self, group):
        """One group's update: a kernel call per parameter (subclasses may batch them)."""
        for p in group["params"]:
            arrays = self._arrays(p)
            if arrays is not None:
                self._update(p, arrays[0], arrays[1], group, self.state.setdefault(p, {}))

    def _update(self, p, param, grad, group, state):  # pragma: no cover - abstract
        raise NotImplementedError

    def _arrays(self, p):
        """(param array, grad array) ready for an in-place kernel, or None to skip ``p``."""
        g = p.grad
        if g is None or not p.requires_grad:
            return None
        data = p.data
        if type(data) is np.ndarray:
            if (data.dtype is not F32 and data.dtype is not F64) or not (
                    data.flags.c_contiguous and data.flags.aligned and data.flags.writeable):
                # the kernels write in place: give the parameter its own C-contiguous array
                data = float_array(np.array(data, order="C", copy=True), "parameter")
                p.data = data
            g = float_array(g, "grad")
        elif is_device(data):
            g = float_array(g, "grad")
        if tuple(g.shape) != tuple(data.shape):
            raise ValueError(f"a parameter of shape {tuple(data.shape)} has a grad of shape "
                             f"{tuple(g.shape)}")
        if g.dtype != data.dtype:
            raise TypeError(f"a parameter of dtype {data.dtype} has a grad of dtype {g.dtype}")
        return data, g

    @staticmethod
    def _state_array(state, key, like):
        """state[key] as an array matching ``like`` (created as zeros, or recast after the
        parameter was moved to another dtype with .double()/.float())."""
        a = state.get(key)
        if a is None:
            a = np.zeros_like(like) if type(like) is np.ndarray else _device_zeros(like)
            state[key] = a
        elif type(like) is np.ndarray:
            if type(a) is not np.ndarray or a.dtype != like.dtype:
                if is_device(a):      # to_numpy gives a fresh host copy: cast it at most
                    from .. import to_numpy
                    a = np.asarray(to_numpy(a), dtype=like.dtype, order="C")
                else:                 # one new array (0-d stays 0-d)
                    a = np.array(a, dtype=like.dtype, order="C")
                state[key] = a
        elif type(a) is np.ndarray:   # state loaded on the host, parameter on the device
            from .. import to_device
            a = to_device(np.array(a, dtype=np.dtype(like.dtype), order="C"))
            state[key] = a
        return a

    @staticmethod
    def _backend(*arrays):
        return dispatch(*arrays)

    # ------------------------------------------------------------------ state dicts
    def state_dict(self):
        """{'state': {index: {name: value}}, 'param_groups': [{hyperparameters, 'params':
        [indices]}]} as torch: parameters are numbered in group order.  Arrays are copies."""
        index = {}
        groups = []
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            ids = []
            for p in g["params"]:
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            packed["params"] = ids
            groups.append(packed)
        state = {}
        for g in self.param_groups:
            for p in g["params"]:
                if p in self.state and self.state[p]:
                    state[index[id(p)]] = {k: _copy_value(v) for k, v in self.state[p].items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restore state and hyperparameters saved by ``state_dict()`` (group structure must
        match).  Nothing changes unless everything checks."""
        if not isinstance(state_dict, dict) or "state" not in state_dict \
                or "param_groups" not in state_dict:
            raise ValueError("optimizer state_dict must be a dict with 'state' and 'param_groups'")
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(f"loaded state dict has {len(saved_groups)} parameter groups, the "
                             f"optimizer has {len(self.param_groups)}")
        id_map = {}
        for gi, (g, sg) in enumerate(zip(self.param_groups, saved_groups)):
            if len(g["params"]) != len(sg["params"]):
                raise ValueError(f"loaded state dict contains a parameter group {gi} of "
                                 f"{len(sg['params'])} parameters that doesn't match the size "
                                 f"of the optimizer's group ({len(g['params'])})")
            for idx, p in zip(sg["params"], g["params"]):
                id_map[idx] = p
        new_state = {}
        for idx, st in state_dict["state"].items():
            try:
                key = int(idx)
            except (TypeError, ValueError):
                raise ValueError(f"optimizer state key {idx!r} is not a parameter index") from None
            if key not in id_map:
                raise ValueError(f"optimizer state refers to parameter {key}, which no group has")
            p = id_map[key]
            like = np.asarray(p) if type(p.data) is not np.ndarray else p.data
            out = {}
            for name, v in st.items():
                if isinstance(v, (np.ndarray, list, tuple)) or hasattr(v, "__array__") and \
                        np.ndim(v) > 0:
                    a = np.array(v, dtype=like.dtype, order="C")   # np.ascontiguousarray
                    if a.shape != like.shape:                         # would make 0-d 1-d
                        raise ValueError(f"optimizer state {name!r} of parameter {key} has shape "
                                         f"{a.shape}, the parameter has shape {like.shape}")
                    out[name] = a
                else:
                    out[name] = float(np.asarray(v)) if name == "step" else copy.deepcopy(v)
            new_state[p] = out
        new_groups = []
        for g, sg in zip(self.param_groups, saved_groups):
            ng = {k: copy.deepcopy(v) for k, v in sg.items() if k != "params"}
            ng["params"] = g["params"]
            self._check_group(ng)
            new_groups.append(ng)
        self.state = new_state
        self.param_groups[:] = new_groups

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if k != "params":
                    lines.append(f"    {k}: {g[k]}")
        lines.append(")")
        return "\n".join(lines)


def _copy_value(v):
    if type(v) is np.ndarray:
        return v.copy()
    if is_device(v):
        from .. import to_numpy
        return to_numpy(v).copy()
    return copy.deepcopy(v)


def _device_zeros(like):
    from .. import to_device
    return to_device(np.zeros(like.shape, dtype=np.dtype(like.dtype)))
