"""Module base: parameters, the forward/backward cache, containers, state dicts.

A module's forward in training mode keeps one ``ctx`` (what its backward needs);
``backward(d_out)`` consumes it, accumulates parameter gradients into ``p.grad``
(like torch) and returns the gradient w.r.t. the input(s).  A second forward before
backward replaces the cache; a second backward without a forward is an error.
"""
from collections import OrderedDict, namedtuple

import numpy as np

from .._validate import F32, F64

__all__ = ["Parameter", "Module", "Sequential", "ModuleList", "ModuleDict", "IncompatibleKeys"]

IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Parameter:
    """A trainable array: ``.data`` (the values) and ``.grad`` (None until a backward)."""

    __slots__ = ("data", "grad", "requires_grad", "__weakref__")

    def __init__(self, data, requires_grad=True):
        if isinstance(data, Parameter):
            data = data.data
        if type(data) is not np.ndarray and hasattr(data, "__cuda_array_interface__"):
            self.data = data
        else:
            arr = np.array(data, copy=True, order="C")
            if arr.dtype not in (F32, F64):
                if arr.dtype.kind in "iub":
                    arr = arr.astype(np.float32)
                else:
                    raise TypeError(f"Parameter data must be float32 or float64, got {arr.dtype}")
            self.data = arr
        self.grad = None
        self.requires_grad = bool(requires_grad)

    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: self.data.size)

    def __array__(self, dtype=None, copy=None):
        a = self.data if type(self.data) is np.ndarray else _to_host(self.data)
        return a if dtype is None else a.astype(dtype)

    def numpy(self):
        return np.asarray(self)

    def accumulate_grad(self, g):
        """grad += g (grad = g the first time; ``g`` must be a fresh array the caller gives up)."""
        if g is None or not self.requires_grad:
            return
        if self.grad is None:
            self.grad = g
        elif type(self.grad) is np.ndarray:
            np.add(self.grad, g, out=self.grad)
        else:
            from .. import cuda
            cuda.accumulate(self.grad, g)

    def zero_grad(self, set_to_none=True):
        if set_to_none or self.grad is None:
            self.grad = None
        elif type(self.grad) is np.ndarray:
            self.grad.fill(0)
        else:
            self.grad = None

    def __repr__(self):
        return f"Parameter(shape={tuple(self.data.shape)}, dtype={self.data.dtype})"


def _to_host(a):
    from .. import cuda
    return cuda.to_numpy(a)


class Module:
    """Base class.  Subclasses define ``forward`` and ``backward``."""

    training = True

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_ctx", None)

    # ------------------------------------------------------------ registration
    def __setattr__(self, name, value):
        d = self.__dict__
        if "_parameters" not in d:
            raise RuntimeError(f"{type(self).__name__}: call super().__init__() before assigning attributes")
        for reg in (d["_parameters"], d["_modules"], d["_buffers"]):
            if name in reg:
                del reg[name]
        if isinstance(value, Parameter):
            d["_parameters"][name] = value
        elif isinstance(value, Module):
            d["_modules"][name] = value
        elif name in d.get("_buffer_names", ()):
            d["_buffers"][name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        for reg in (self._parameters, self._modules, self._buffers):
            reg.pop(name, None)
        object.__delattr__(self, name)

    def register_parameter(self, name, param):
        if param is None:
            self._parameters.pop(name, None)
            object.__setattr__(self, name, None)
        else:
            setattr(self, name, param if isinstance(param, Parameter) else Parameter(param))

    def register_buffer(self, name, value, persistent=True):
        """A non-trainable array that is part of the state (e.g. running_mean)."""
        names = self.__dict__.setdefault("_buffer_names", set())
        names.add(name)
        if not persistent:
            self.__dict__.setdefault("_non_persistent", set()).add(name)
        self._buffers[name] = value
        object.__setattr__(self, name, value)

    def add_module(self, name, module):
        setattr(self, name, module)

    # ------------------------------------------------------------ forward / backward
    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward")

    def backward(self, *grads):
        raise NotImplementedError(f"{type(self).__name__} does not define backward")

    def _keep(self, ctx):
        """Keep ``ctx`` for backward when training (forward calls this)."""
        if self.training:
            object.__setattr__(self, "_ctx", ctx)

    def _take(self):
        """The cache of the last training-mode forward; consumed by backward."""
        ctx = self._ctx
        if ctx is None:
            raise RuntimeError(
                f"{type(self).__name__}.backward() needs a preceding forward in training mode "
                f"(call model.train() and run forward first; each backward consumes that "
                f"forward's cache)")
        object.__setattr__(self, "_ctx", None)
        return ctx

    # ------------------------------------------------------------ traversal
    def children(self):
        return iter(self._modules.values())

    def named_children(self):
        return iter(self._modules.items())

    def named_modules(self, prefix="", memo=None):
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            yield from m.named_modules(f"{prefix}.{name}" if prefix else name, memo)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_parameters(self, prefix="", recurse=True):
        seen = set()
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for name, p in m._parameters.items():
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                yield (f"{mprefix}.{name}" if mprefix else name), p

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix=""):
        for mprefix, m in self.named_modules(prefix):
            for name, b in m._buffers.items():
                if b is not None:
                    yield (f"{mprefix}.{name}" if mprefix else name), b

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            p.zero_grad(set_to_none)

    def train(self, mode=True):
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
            if not mode:
                object.__setattr__(m, "_ctx", None)
        return self

    def eval(self):
        return self.train(False)

    # ------------------------------------------------------------ state
    def state_dict(self):
        """Parameters and persistent buffers by dotted name (arrays, not copies)."""
        out = OrderedDict()
        for mprefix, m in self.named_modules():
            skip = m.__dict__.get("_non_persistent", ())
            for name, p in m._parameters.items():
                if p is not None:
                    out[f"{mprefix}.{name}" if mprefix else name] = p.data
            for name, b in m._buffers.items():
                if b is not None and name not in skip:
                    out[f"{mprefix}.{name}" if mprefix else name] = b
        return out

    def _state_slots(self):
        """name -> (owner module, attribute, is_parameter) for every state_dict entry."""
        slots = OrderedDict()
        for mprefix, m in self.named_modules():
            skip = m.__dict__.get("_non_persistent", ())
            for name, p in m._parameters.items():
                if p is not None:
                    slots[f"{mprefix}.{name}" if mprefix else name] = (m, name, True)
            for name, b in m._buffers.items():
                if b is not None and name not in skip:
                    slots[f"{mprefix}.{name}" if mprefix else name] = (m, name, False)
        return slots

    def load_state_dict(self, state_dict, strict=True):
        """Copy arrays in by name.  Shape mismatches are always errors; unknown or missing
        names are errors when ``strict``.  Nothing is changed unless everything checks."""
        if not hasattr(state_dict, "items"):
            raise TypeError(f"state_dict must be a mapping of names to arrays, got {type(state_dict).__name__}")
        slots = self._state_slots()
        missing = [k for k in slots if k not in state_dict]
        unexpected = [k for k in state_dict if k not in slots]
        errors = []
        if strict and unexpected:
            errors.append("Unexpected key(s) in state_dict: " + ", ".join(repr(k) for k in unexpected))
        if strict and missing:
            errors.append("Missing key(s) in state_dict: " + ", ".join(repr(k) for k in missing))
        staged = []
        for key, (m, name, is_param) in slots.items():
            if key not in state_dict:
                continue
            cur = getattr(m, name)
            cur_arr = cur.data if is_param else cur
            val = state_dict[key]
            if hasattr(val, "__cuda_array_interface__") and type(val) is not np.ndarray:
                val = _to_host(val)
            try:
                val = np.asarray(val)
            except Exception as e:
                errors.append(f"{key!r}: not an array ({e})")
                continue
            if val.dtype.kind not in "fiub":
                errors.append(f"{key!r}: dtype {val.dtype} is not numeric")
                continue
            if tuple(val.shape) != tuple(cur_arr.shape):
                errors.append(f"size mismatch for {key!r}: copying an array of shape {tuple(val.shape)}, "
                              f"the shape in the current model is {tuple(cur_arr.shape)}")
                continue
            staged.append((m, name, is_param, val.astype(cur_arr.dtype, copy=True), cur_arr))
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                               + "\n\t".join(errors))
        for m, name, is_param, val, cur_arr in staged:
            if type(cur_arr) is not np.ndarray:
                from .. import cuda
                val = cuda.to_device(val)
            if is_param:
                getattr(m, name).data = val
            else:
                m.register_buffer(name, val)
        return IncompatibleKeys(missing, unexpected)

    # ------------------------------------------------------------ dtype / device
    def to(self, target):
        """``to("cuda")`` / ``to("cpu")`` moves parameters and buffers; ``to(np.float64)`` casts."""
        if isinstance(target, str) and target in ("cuda", "cpu"):
            if target == "cuda":
                from .. import cuda
                conv = cuda.to_device
            else:
                conv = lambda a: a if type(a) is np.ndarray else _to_host(a)  # noqa: E731
        else:
            try:
                dt = np.dtype(target)
            except TypeError:
                raise ValueError(f"to(): expected 'cpu', 'cuda' or a float dtype, got {target!r}") from None
            if dt not in (F32, F64):
                raise ValueError(f"to(): parameters must be float32 or float64, got {dt}")
            conv = lambda a: a.astype(dt) if a.dtype != dt else a  # noqa: E731
        for m in self.modules():
            for name, p in m._parameters.items():
                if p is not None:
                    p.data = conv(p.data)
                    if p.grad is not None:
                        p.grad = conv(p.grad)
            for name, b in list(m._buffers.items()):
                if b is not None and getattr(b, "dtype", None) is not None and np.dtype(b.dtype).kind == "f":
                    m.register_buffer(name, conv(b), name not in m.__dict__.get("_non_persistent", ()))
            object.__setattr__(m, "_ctx", None)
        return self

    def float(self):
        return self.to(np.float32)

    def double(self):
        return self.to(np.float64)

    def cuda(self):
        return self.to("cuda")

    def cpu(self):
        return self.to("cpu")

    # ------------------------------------------------------------ repr
    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = []
        for name, m in self._modules.items():
            sub = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {sub}")
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"


class Sequential(Module):
    """Modules in order; backward runs them in reverse."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                if not isinstance(m, Module):
                    raise TypeError(f"Sequential: argument {i} is {type(m).__name__}, not a Module")
                self.add_module(str(i), m)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, i):
        mods = list(self._modules.values())
        if isinstance(i, slice):
            return Sequential(*mods[i])
        return mods[i]

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def backward(self, dy):
        for m in reversed(list(self._modules.values())):
            dy = m.backward(dy)
        return dy


class ModuleList(Module):
    """A list of modules (registered, so their parameters are found)."""

    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module):
        if not isinstance(module, Module):
            raise TypeError(f"ModuleList holds Modules, got {type(module).__name__}")
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, i):
        mods = list(self._modules.values())
        if isinstance(i, slice):
            return ModuleList(mods[i])
        return mods[i]


class ModuleDict(Module):
    """Modules by name, in insertion order (torch.nn.ModuleDict): state_dict keys are
    ``<name>.<param>``; ``update`` takes a mapping or an iterable of (name, module) pairs."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def _check_key(self, key):
        if not isinstance(key, str):
            raise TypeError(f"ModuleDict keys must be str, got {type(key).__name__}")
        if "." in key or key == "":
            raise KeyError(f"module name can't contain \".\" or be empty, got {key!r}")
        if key not in self._modules and (hasattr(type(self), key) or key in self.__dict__):
            raise KeyError(f"attribute {key!r} already exists on ModuleDict")

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self._check_key(key)
        if not isinstance(module, Module):
            raise TypeError(f"ModuleDict holds Modules, got {type(module).__name__} for {key!r}")
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]
        object.__delattr__(self, key)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(list(self._modules))

    def __contains__(self, key):
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def pop(self, key):
        m = self._modules[key]
        del self[key]
        return m

    def clear(self):
        for key in list(self._modules):
            del self[key]

    def update(self, modules):
        if isinstance(modules, (dict, ModuleDict)):
            pairs = list(modules.items())
        else:
            pairs = []
            for j, item in enumerate(modules):
                if isinstance(item, (str, bytes)) or len(item) != 2:
                    raise ValueError(f"ModuleDict update sequence element #{j} must be a "
                                     f"(name, module) pair")
                pairs.append((item[0], item[1]))
        for key, m in pairs:
            self[key] = m
