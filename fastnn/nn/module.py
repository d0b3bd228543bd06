"""Module base: parameters, the forward/backward caches, containers, state dicts.

Every training-mode forward of a module pushes one cache (what its backward needs) on
that module's stack; ``backward(d_out)`` uses the newest one, accumulates parameter
gradients into ``p.grad`` (like torch) and returns the gradient w.r.t. the input(s).
So a module called twice (weight sharing, siamese towers, a block applied twice) is
backpropagated last-call-first, as the chain rule walks the graph, and gets exactly the
gradients of two separate calls.  ``Module.call`` returns a handle on one call's caches
for out-of-order backward.  Nothing is kept in ``eval()`` mode or inside
``fastnn.no_grad()``.

Every subclass's ``backward`` is wrapped once, when the class is created
(``__init_subclass__``): the cache it used is popped only when it returns, so a backward
that raises (a wrong gradient shape or dtype) leaves the cache for the corrected call;
then the module's backward hooks run.
"""
import functools
import gc
import inspect
import os
import sys
import types
import warnings
import weakref
from collections import OrderedDict, namedtuple

import numpy as np

from .._grad import _tls
from .._backend import Backend, placed
from .._validate import F32, F64, parameter_data

__all__ = ["Parameter", "Module", "Sequential", "ModuleList", "ModuleDict", "IncompatibleKeys",
           "CallHandle", "RemovableHandle", "PendingCallsWarning", "ParameterList", "ParameterDict"]


class PendingCallsWarning(UserWarning):
    """A module holds many training-mode calls that no backward has consumed (a forward-only
    loop in training mode: validation or inference without ``no_grad()`` or ``eval()``).
    A UserWarning, so Python shows it by default (a ResourceWarning would be hidden)."""


IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Parameter:
    """A trainable array: ``.data`` (the values) and ``.grad`` (None until a backward)."""

    __slots__ = ("data", "grad", "requires_grad", "__weakref__")

    def __init__(self, data, requires_grad=True):
        if isinstance(data, Parameter):
            data = data.data
        self.data = parameter_data(data)
        self.grad = None
        self.requires_grad = bool(requires_grad)

    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: self.data.size)

    def __array__(self, dtype=None, copy=None):
        a = placed(self.data).to_host(self.data)
        return a if dtype is None else a.astype(dtype)

    def numpy(self):
        return np.asarray(self)

    def accumulate_grad(self, g):
        """grad += g (grad = g the first time; ``g`` must be a fresh array the caller gives up)."""
        if g is None or not self.requires_grad:
            return
        if self.grad is None:
            self.grad = g
        else:
            placed(self.grad, g).accumulate(self.grad, g)

    def zero_grad(self, set_to_none=True):
        if set_to_none or self.grad is None:
            self.grad = None
        else:
            placed(self.grad).zero_(self.grad)

    def __repr__(self):
        return f"Parameter(shape={tuple(self.data.shape)}, dtype={self.data.dtype})"


def grad_flags(weight, bias=None):
    """linear_bwd's ``weight_grad`` / ``bias_grad`` for a layer's parameters: False for a
    frozen one (requires_grad False) or a missing bias, so its gradient is not computed."""
    return {"weight_grad": weight.requires_grad,
            "bias_grad": bias is not None and bias.requires_grad}


# A module warns (once) when it holds more pending calls than this: forward-only loops in
# training mode (validation without no_grad/eval) would otherwise grow without bound.
PENDING_WARN = 10000
# ... or sooner when its pending caches come to more than this many bytes (None: an eighth
# of the machine's memory), checked at 64, 128, 256, ... pending calls: an LSTM(256, 256)
# on (64, 32, 256) keeps 16 MiB a call, so 10,000 calls would need 160 GiB.
PENDING_BYTES_WARN = None
_PENDING_CHECK_FROM = 64


def _pending_bytes_limit():
    if PENDING_BYTES_WARN is not None:
        return PENDING_BYTES_WARN
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 8
    except (ValueError, OSError, AttributeError):       # no sysconf (Windows)
        return 4 << 30


_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _user_stacklevel():
    """warnings.warn's stacklevel that names the first caller outside the fastnn package
    (the user's line that called the module), from the function calling warn."""
    f, level = sys._getframe(2), 2
    while f is not None and f.f_code.co_filename.startswith(_PKG):
        f, level = f.f_back, level + 1
    return level


_WALK = (tuple, list, dict, set, frozenset)


def _walks(o):
    """Whether a cache walk descends into ``o``: containers and fastnn's own cache objects
    (the recurrent layers' saved stacks), never a backend, module or parameter."""
    if isinstance(o, _WALK):
        return True
    t = type(o)
    return (t.__module__ or "").startswith("fastnn.") and not isinstance(
        o, (Backend, Module, Parameter, type))


def _cache_bytes(ctx, skip):
    """Bytes of the arrays one cache holds (host arrays counted once per owning buffer,
    device arrays by ``nbytes``), leaving out the arrays whose ids are in ``skip`` (the
    module's parameters and buffers, which a cache may hold but no call adds).  Walks
    containers and fastnn's cache objects (gc.get_referents), at most 4096 objects."""
    seen = set(skip)
    total = 0
    todo = [ctx]
    budget = 4096
    while todo and budget > 0:
        o = todo.pop()
        budget -= 1
        if isinstance(o, np.ndarray):
            while isinstance(o.base, np.ndarray):      # a view: its owner, once
                o = o.base
            if id(o) not in seen:
                seen.add(id(o))
                total += o.nbytes
            continue
        if id(o) in seen:
            continue
        seen.add(id(o))
        if hasattr(o, "__cuda_array_interface__"):
            total += int(getattr(o, "nbytes", 0))
        elif _walks(o):
            todo.extend(gc.get_referents(o))
    return total


# What a container's training-mode call pushes when its forward kept nothing of its own, so
# that every module counts its pending calls (_pending_calls) and its backward pops one.
_CALL = type("_CallMarker", (), {"__repr__": lambda self: "<call>", "__slots__": ()})()

# Module.__dict__["_bw"]: where the module's (wrapped) backward is
_IDLE, _RUNNING, _TOOK = 0, 1, 2       # not running / running / running and took its cache


def _wrap_backward(fn):
    """``fn`` (a subclass's backward) that pops the cache it used only when it returns,
    then runs the backward hooks.  A super().backward() call from inside a backward of
    the same module passes straight through (the outermost call owns the pop)."""
    code = fn.__code__
    if code.co_argcount == 2 and not fn.__defaults__ and not code.co_kwonlyargcount \
            and not code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        backward = _guarded(fn, _one_grad)       # backward(self, dy): no argument packing
    else:
        run = _guarded(lambda self, packed: fn(self, *packed[0], **packed[1]), _packed_grads)

        def backward(self, *grads, **kwargs):
            return run(self, (grads, kwargs))
    backward = functools.wraps(fn)(backward)
    backward._fastnn_wrapped = True
    return backward


def _one_grad(dy):
    return (dy,)


def _packed_grads(packed):
    return packed[0]


def _guarded(fn, grad_output):
    """backward(self, arg) around fn(self, arg); ``grad_output(arg)``: the hooks' tuple."""

    def backward(self, arg):
        d = self.__dict__
        if d["_bw"]:
            return fn(self, arg)
        d["_bw"] = _RUNNING
        try:
            out = fn(self, arg)
        finally:
            state = d["_bw"]
            d["_bw"] = _IDLE
        if state is _TOOK:
            d["_ctx"].pop()
        else:
            st = d["_ctx"]
            if st and st[-1] is _CALL:   # a container's call marker (see _forward_recorded)
                st.pop()
        if d["_backward_hooks"]:
            out = self._run_backward_hooks(out, grad_output(arg))
        return out
    return backward


class RemovableHandle:
    """What the ``register_*_hook`` methods return: ``.remove()`` unregisters the hook."""

    _next_id = 0

    def __init__(self, hooks, on_remove=None):
        self._hooks = hooks
        self._on_remove = on_remove
        self.id = RemovableHandle._next_id
        RemovableHandle._next_id += 1

    def remove(self):
        self._hooks.pop(self.id, None)
        if self._on_remove is not None:
            self._on_remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


# Modules with forward hooks (or pre-hooks): containers that would run a submodule's work
# themselves (a fused product, the BERT and GPT inference paths) call it instead when it
# or one below it is here (``subtree_hooked``).
_HOOKED = weakref.WeakSet()


def subtree_hooked(module):
    """Whether a module below ``module`` (not ``module`` itself) has forward hooks."""
    return bool(_HOOKED) and any(m is not module and m in _HOOKED for m in module.modules())


def _hook_args(res, with_kwargs, kwargs):
    """(args, kwargs) from what a forward pre-hook returned (not None)."""
    if not with_kwargs:
        return (res if isinstance(res, tuple) else (res,)), kwargs
    if not (isinstance(res, tuple) and len(res) == 2 and isinstance(res[1], dict)):
        raise RuntimeError(f"a forward pre-hook registered with with_kwargs=True must return "
                           f"None or an (args, kwargs) tuple, got {type(res).__name__}")
    args, kwargs = res
    return (args if isinstance(args, tuple) else (args,)), kwargs


def _replaced(module, what):
    own = "input" if what == "pre-hook" else "output"
    return RuntimeError(
        f"a forward {what} of {type(module).__name__} returned a replacement while the call "
        f"keeps a cache for backward: fastnn does not differentiate through hooks, so "
        f"backward would treat the replacement as this module's own {own}.  "
        f"Replace values in eval() mode or under fastnn.no_grad(); in training, let the "
        f"hook observe only (return None)")


class Module:
    """Base class.  Subclasses define ``forward`` and ``backward``."""

    training = True
    _fhooks = None      # [pre-hooks, hooks] (ordered dicts) while the module has any

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        bw = cls.__dict__.get("backward")
        if isinstance(bw, types.FunctionType) and not getattr(bw, "_fastnn_wrapped", False):
            cls.backward = _wrap_backward(bw)

    def __init__(self):
        d = self.__dict__
        d["_parameters"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_modules"] = OrderedDict()
        d["training"] = True
        self._reset_call_state()

    def _reset_call_state(self):
        """No caches, no backward in progress, no hooks (a fresh or unpickled module)."""
        d = self.__dict__
        d["_ctx"] = []                   # one cache per pending training-mode call, newest last
        d["_bw"] = _IDLE                 # see _wrap_backward
        d.setdefault("_backward_hooks", OrderedDict())

    # ------------------------------------------------------------ pickling / copying
    def __getstate__(self):
        """The module without its caches or hooks: caches are per call (and may hold device
        buffers or large activations), hooks belong to the process that registered them."""
        state = self.__dict__.copy()
        state["_ctx"] = []
        state["_bw"] = _IDLE
        state.pop("_warned_pending", None)
        state.pop("_infer", None)        # inference caches (packed weights): rebuilt on use
        state["_backward_hooks"] = OrderedDict()
        state.pop("_fhooks", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if "_bw" not in state:     # pickled by an older fastnn
            self._reset_call_state()

    # ------------------------------------------------------------ registration
    def __setattr__(self, name, value):
        d = self.__dict__
        if "_parameters" not in d:
            raise RuntimeError(f"{type(self).__name__}: call super().__init__() before assigning attributes")
        if isinstance(value, Parameter):
            target = d["_parameters"]
        elif isinstance(value, Module):
            target = d["_modules"]
        elif name in d.get("_buffer_names", ()):
            target = d["_buffers"]
        else:
            target = None
        for reg in (d["_parameters"], d["_modules"], d["_buffers"]):
            if reg is not target and name in reg:
                del reg[name]
        if target is not None:
            target[name] = value         # a replacement keeps its place (state_dict order)
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

    def register_module(self, name, module):
        """torch's alias of ``add_module``."""
        self.add_module(name, module)

    # ------------------------------------------------------------ forward / backward
    def __call__(self, *args, **kwargs):
        if self._fhooks is not None:
            return self._call_hooked(args, kwargs)[0]
        # A leaf pushes its cache as its forward's last step, so a leaf's forward that raises
        # has pushed nothing: it runs straight through (the hot path).
        if self._modules and self.training:
            rec = _tls.rec
            if rec is not False:
                return self._forward_recorded(rec, args, kwargs)[0]
        return self.forward(*args, **kwargs)

    def _forward_recorded(self, rec, args, kwargs):
        """(forward's output, the (module, cache) pushes it made).  A container's call is
        recorded so that a forward raising halfway takes back what the submodules before the
        failure kept: no orphan cache can later pair with another call's backward."""
        mine = []
        st = self._ctx
        n = len(st)
        _tls.rec = mine
        try:
            out = self.forward(*args, **kwargs)
        except BaseException:
            _tls.rec = rec
            _drop(mine)
            raise
        _tls.rec = rec
        if len(st) == n:                 # the forward kept nothing of its own: count the call
            st.append(_CALL)
            mine.append((self, _CALL))
        if rec is not None:              # inside an enclosing recorded call
            rec.extend(mine)
        else:                            # the outermost call: what the whole call keeps
            n = len(st)
            if n >= _PENDING_CHECK_FROM and not n & (n - 1):
                self._check_pending_bytes([c for _, c in mine], n)
        return out, mine

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward")

    def backward(self, *grads):
        raise NotImplementedError(f"{type(self).__name__} does not define backward")

    def _keep(self, ctx):
        """Push ``ctx`` for backward when training and grad mode is on (forward calls this)."""
        if self.training:
            rec = _tls.rec
            if rec is False:
                return
            st = self._ctx
            st.append(ctx)
            if rec is not None:              # inside a recorded call: remember the push
                rec.append((self, ctx))
            n = len(st)
            if n > PENDING_WARN:
                self._warn_pending()
            elif n >= _PENDING_CHECK_FROM and not n & (n - 1):    # 64, 128, 256, ...
                self._check_pending_bytes(ctx, n)

    def _check_pending_bytes(self, ctx, n):
        """Warn when n pending calls of the newest call's size pass the byte limit (``ctx``:
        the newest call's cache; a container's: the list of every cache its call pushed)."""
        if self.__dict__.get("_warned_pending"):
            return
        skip = set()
        for a in [p.data for p in self.parameters()] + [b for _, b in self.named_buffers()]:
            skip.add(id(a))
            while isinstance(a, np.ndarray) and isinstance(a.base, np.ndarray):
                a = a.base
                skip.add(id(a))
        held = n * _cache_bytes(ctx, skip)
        if held > _pending_bytes_limit():
            self._warn_pending(held)

    def _warn_pending(self, held=None):
        if not self.__dict__.get("_warned_pending"):
            self.__dict__["_warned_pending"] = True
            size = "" if held is None else f", about {held / (1 << 30):.1f} GiB of caches"
            warnings.warn(
                f"{type(self).__name__} holds {len(self._ctx)} training-mode calls that no "
                f"backward has consumed{size} (each keeps its cache until its backward, "
                f"eval() or release): run inference under fastnn.no_grad() or in eval() "
                f"mode", PendingCallsWarning, stacklevel=_user_stacklevel())

    def _take(self):
        """The newest pending call's cache; the backward wrapper pops it when backward returns."""
        st = self._ctx
        if not st:
            raise RuntimeError(
                f"{type(self).__name__}.backward() needs a preceding forward in training mode "
                f"(call model.train() and run forward outside fastnn.no_grad(); each backward "
                f"consumes one forward's cache, newest first)")
        d = self.__dict__
        bw = d["_bw"]
        if bw is _RUNNING:
            d["_bw"] = _TOOK             # the backward wrapper pops it when backward returns
            return st[-1]
        if bw is _TOOK:
            raise RuntimeError(f"{type(self).__name__}.backward() took its cache twice")
        return st.pop()                  # called outside a backward: consume it now

    def _pending_calls(self):
        """How many training-mode calls of this module still wait for their backward."""
        return len(self._ctx)

    def _call_hooked(self, args, kwargs):
        """A call of a module with forward hooks -> (output, the (module, cache) pushes it
        made): the pre-hooks, the call, the hooks, as torch runs them.  A hook that raises,
        or returns a replacement while the call keeps caches, takes back what the call
        kept."""
        pre, post = self._fhooks
        rec = _tls.rec
        keeps = self.training and rec is not False
        for hook, with_kwargs in tuple(pre.values()):
            res = hook(self, args, kwargs) if with_kwargs else hook(self, args)
            if res is not None:
                if keeps:
                    raise _replaced(self, "pre-hook")
                args, kwargs = _hook_args(res, with_kwargs, kwargs)
        if keeps:
            out, mine = self._forward_recorded(rec, args, kwargs)
        else:
            out, mine = self.forward(*args, **kwargs), []
        try:
            for hook, with_kwargs in tuple(post.values()):
                res = hook(self, args, kwargs, out) if with_kwargs else hook(self, args, out)
                if res is not None:
                    if keeps:
                        raise _replaced(self, "hook")
                    out = res
        except BaseException:
            _drop(mine)
            raise
        return out, mine

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """``hook(module, args)`` runs before each call's forward (``hook(module, args,
        kwargs)`` with ``with_kwargs=True``).  It may return new positional arguments (a
        tuple, or one value) -- with ``with_kwargs``, an ``(args, kwargs)`` pair -- or None.
        A replacement is taken in eval() mode or under ``no_grad()`` only: backward does
        not differentiate through a hook.  Returns a handle whose ``.remove()`` unregisters
        the hook."""
        return self._add_forward_hook(0, hook, prepend, with_kwargs)

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False):
        """``hook(module, args, output)`` runs after each call's forward (``hook(module,
        args, kwargs, output)`` with ``with_kwargs=True``), as in torch: to read a layer's
        output, or (eval() mode, ``no_grad()``) return a replacement for it.  Containers
        call a hooked submodule even where they would otherwise run its work fused with
        their own.  Returns a handle whose ``.remove()`` unregisters the hook."""
        return self._add_forward_hook(1, hook, prepend, with_kwargs)

    def _add_forward_hook(self, which, hook, prepend, with_kwargs):
        if not callable(hook):
            raise TypeError(f"hook must be callable, got {type(hook).__name__}")
        if self._fhooks is None:
            self.__dict__["_fhooks"] = [OrderedDict(), OrderedDict()]
            _HOOKED.add(self)
        hooks = self._fhooks[which]
        h = RemovableHandle(hooks, self._forward_hooks_changed)
        hooks[h.id] = (hook, bool(with_kwargs))
        if prepend:
            hooks.move_to_end(h.id, last=False)
        return h

    def _forward_hooks_changed(self):
        f = self._fhooks
        if f is not None and not f[0] and not f[1]:
            del self.__dict__["_fhooks"]
            _HOOKED.discard(self)

    def call(self, *args, **kwargs):
        """``self(*args, **kwargs)`` plus a ``CallHandle`` on this call's caches (its own and
        every submodule's): ``out, h = m.call(x)``; later ``h.backward(d_out)`` backpropagates
        exactly this call, whatever calls came after it."""
        if self._fhooks is not None:
            out, mine = self._call_hooked(args, kwargs)
            return out, CallHandle(self, mine)
        rec = _tls.rec
        if rec is False or not self.training:
            return self(*args, **kwargs), CallHandle(self, [])
        out, mine = self._forward_recorded(rec, args, kwargs)
        return out, CallHandle(self, mine)

    def register_full_backward_hook(self, hook):
        """``hook(module, grad_input, grad_output)`` runs after each successful backward of this
        module, when its parameter gradients have been accumulated.  ``grad_input``: the
        gradients backward returns, as a tuple; ``grad_output``: the gradients it was given,
        as a tuple.  A hook may return a new ``grad_input`` tuple (replacing what backward
        returns) or None.  Returns a handle whose ``.remove()`` unregisters the hook."""
        if not callable(hook):
            raise TypeError(f"hook must be callable, got {type(hook).__name__}")
        hooks = self._backward_hooks
        h = RemovableHandle(hooks)
        hooks[h.id] = hook
        return h

    def _run_backward_hooks(self, out, grads):
        single = not isinstance(out, tuple)
        grad_input = (out,) if single else out
        for hook in tuple(self._backward_hooks.values()):
            res = hook(self, grad_input, grads)
            if res is not None:
                grad_input = tuple(res) if isinstance(res, (tuple, list)) else (res,)
        return grad_input[0] if single and len(grad_input) == 1 else grad_input

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

    def named_buffers(self, prefix="", recurse=True):
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for name, b in m._buffers.items():
                if b is not None:
                    yield (f"{mprefix}.{name}" if mprefix else name), b

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn):
        """``fn(m)`` for every submodule (children first) and then this module, as torch's
        ``apply`` (the usual way to run a custom initialisation); returns self."""
        for m in self.children():
            if m is not None:
                m.apply(fn)
        fn(self)
        return self

    def requires_grad_(self, requires_grad=True):
        """Set ``requires_grad`` on every parameter (False freezes them: backward still
        returns input gradients, but no ``.grad`` is accumulated and optimizers skip
        them); returns self."""
        for p in self.parameters():
            p.requires_grad = bool(requires_grad)
        return self

    def get_submodule(self, target):
        """The submodule at dotted path ``target`` ("" is this module), as torch's."""
        if not isinstance(target, str):
            raise TypeError(f"target must be a str, got {type(target).__name__}")
        m = self
        if target == "":
            return m
        walked = []
        for name in target.split("."):
            sub = m._modules.get(name)
            if sub is None:
                where = ".".join(walked) or type(self).__name__
                raise AttributeError(f"{where} has no submodule {name!r} (looking up "
                                     f"{target!r})")
            walked.append(name)
            m = sub
        return m

    def _get_member(self, target, reg, kind):
        mod, _, name = target.rpartition(".") if isinstance(target, str) else (None, None, None)
        if name is None:
            raise TypeError(f"target must be a str, got {type(target).__name__}")
        m = self.get_submodule(mod)
        found = getattr(m, reg).get(name)
        if found is None:
            raise AttributeError(f"{type(m).__name__} has no {kind} {name!r} (looking up "
                                 f"{target!r})")
        return found

    def get_parameter(self, target):
        """The Parameter at dotted path ``target`` (e.g. "encoder.layer.0.output.dense.weight")."""
        return self._get_member(target, "_parameters", "parameter")

    def get_buffer(self, target):
        """The buffer at dotted path ``target`` (e.g. "bn1.running_mean")."""
        return self._get_member(target, "_buffers", "buffer")

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            p.zero_grad(set_to_none)

    def train(self, mode=True):
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
            m.__dict__.pop("_infer", None)    # inference-only caches (packed weights)
            if not mode:
                m._ctx.clear()
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
            val = placed(val).to_host(val)
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
            val = placed(cur_arr).to_backend(val)       # where the current value lives
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
                from .. import to_device as conv
            else:
                conv = lambda a: placed(a).to_host(a)  # noqa: E731
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
            m._ctx.clear()
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


def _drop(entries):
    """Remove the recorded (module, cache) pushes from their stacks, newest first."""
    for m, ctx in reversed(entries):
        st = m._ctx
        for i in range(len(st) - 1, -1, -1):
            if st[i] is ctx:
                del st[i]
                break


class CallHandle:
    """One training-mode call of a module (from ``Module.call``): the caches that call pushed
    on the module and on each submodule.  ``backward(*grads)`` backpropagates exactly that
    call (moving its caches to the top of each stack first), so calls can be
    backpropagated in any order; ``release()`` drops the call's caches without a backward.
    A handle is used once."""

    __slots__ = ("module", "_entries")

    def __init__(self, module, entries):
        self.module = module
        self._entries = entries          # [(module, cache)] in push order

    @property
    def pending(self):
        """True while this call's caches wait for a backward (or release)."""
        return bool(self._entries)

    def _locate(self, what):
        """{module: [stack indices of this call's caches]}; raises if any is gone."""
        if not self._entries:
            raise RuntimeError(f"this call of {type(self.module).__name__} holds no cache: it "
                               f"was already backpropagated or released (a handle is used "
                               f"once), or ran in eval() mode or under no_grad()")
        where = {}
        for m, ctx in self._entries:
            taken = where.setdefault(m, [])
            st = m._ctx
            for i in range(len(st) - 1, -1, -1):
                if st[i] is ctx and i not in taken:
                    taken.append(i)
                    break
            else:
                raise RuntimeError(
                    f"cannot {what} this call of {type(self.module).__name__}: a cache of its "
                    f"{type(m).__name__} was already consumed (by a plain backward, eval() or "
                    f"another handle)")
        return where

    def backward(self, *grads, **kwargs):
        """``module.backward(*grads, **kwargs)`` for exactly this call."""
        where = self._locate("backpropagate")
        saved = {m: list(m._ctx) for m in where}
        for m, idx in where.items():
            st = m._ctx
            mine = [st[i] for i in sorted(idx)]
            keep = set(idx)
            st[:] = [c for i, c in enumerate(st) if i not in keep] + mine
        try:
            out = self.module.backward(*grads, **kwargs)
        except BaseException:
            # Nothing consumed (the usual case: a bad gradient rejected up front): put every
            # stack back in its order, so plain last-call-first backward still holds.
            for m, before in saved.items():
                if len(m._ctx) == len(before):
                    m._ctx[:] = before
            raise
        self._entries = []
        return out

    def release(self):
        """Drop this call's caches without a backward (e.g. a forward whose output is unused)."""
        if not self._entries:
            return
        where = self._locate("release")
        for m, idx in where.items():
            keep = set(idx)
            m._ctx[:] = [c for i, c in enumerate(m._ctx) if i not in keep]
        self._entries = []


class _NamedDict(Module):
    """What ModuleDict and ParameterDict share: entries by str name in insertion order, in
    the registry ``_REG`` (``_modules`` or ``_parameters``), each also an attribute; the
    subclass's ``__setitem__`` checks and stores a value (``_WHAT``: "module" or
    "parameter", for messages)."""

    _REG = "_modules"
    _WHAT = "module"

    def __init__(self, entries=None):
        super().__init__()
        if entries is not None:
            self.update(entries)

    def _entries(self):
        return self.__dict__[self._REG]

    def _check_key(self, key):
        name = type(self).__name__
        if not isinstance(key, str):
            raise TypeError(f"{name} keys must be str, got {type(key).__name__}")
        if "." in key or key == "":
            raise KeyError(f"{self._WHAT} name can't contain \".\" or be empty, got {key!r}")
        if key not in self._entries() and (hasattr(type(self), key) or key in self.__dict__):
            raise KeyError(f"attribute {key!r} already exists on {name}")

    def __getitem__(self, key):
        return self._entries()[key]

    def __delitem__(self, key):
        del self._entries()[key]
        object.__delattr__(self, key)

    def __len__(self):
        return len(self._entries())

    def __iter__(self):
        return iter(list(self._entries()))

    def __contains__(self, key):
        return key in self._entries()

    def keys(self):
        return self._entries().keys()

    def items(self):
        return self._entries().items()

    def values(self):
        return self._entries().values()

    def pop(self, key):
        v = self._entries()[key]
        del self[key]
        return v

    def clear(self):
        for key in list(self._entries()):
            del self[key]

    def update(self, entries):
        """From a mapping (anything with ``items()``) or an iterable of (name, value) pairs."""
        if hasattr(entries, "items"):
            pairs = list(entries.items())
        else:
            pairs = []
            for j, item in enumerate(entries):
                if isinstance(item, (str, bytes)) or len(item) != 2:
                    raise ValueError(f"{type(self).__name__} update sequence element #{j} "
                                     f"must be a (name, {self._WHAT}) pair")
                pairs.append((item[0], item[1]))
        for key, v in pairs:
            self[key] = v


class ModuleDict(_NamedDict):
    """Modules by name, in insertion order (torch.nn.ModuleDict): state_dict keys are
    ``<name>.<param>``; ``update`` takes a mapping or an iterable of (name, module) pairs."""

    def __init__(self, modules=None):
        super().__init__(modules)

    def __setitem__(self, key, module):
        self._check_key(key)
        if not isinstance(module, Module):
            raise TypeError(f"ModuleDict holds Modules, got {type(module).__name__} for {key!r}")
        self.add_module(key, module)


def _as_parameter(value, where):
    if isinstance(value, Parameter):
        return value
    try:
        return Parameter(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{where} holds Parameters (or float arrays to wrap), got "
                        f"{type(value).__name__}: {e}") from None


class ParameterList(Module):
    """Parameters in a list (torch.nn.ParameterList): state_dict keys ``0``, ``1``, ...;
    arrays given are wrapped as Parameters (a copy, as ``Parameter(array)``)."""

    def __init__(self, values=None):
        super().__init__()
        if values is not None:
            self.extend(values)

    def _index(self, i):
        n = len(self._parameters)
        if not isinstance(i, (int, np.integer)) or isinstance(i, bool):
            raise TypeError(f"ParameterList indices must be integers or slices, got "
                            f"{type(i).__name__}")
        j = int(i) + n if i < 0 else int(i)
        if not 0 <= j < n:
            raise IndexError(f"index {i} is out of range for a ParameterList of {n}")
        return str(j)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return ParameterList(list(self._parameters.values())[i])
        return self._parameters[self._index(i)]

    def __setitem__(self, i, value):
        setattr(self, self._index(i), _as_parameter(value, "ParameterList"))

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(list(self._parameters.values()))

    def append(self, value):
        setattr(self, str(len(self._parameters)), _as_parameter(value, "ParameterList"))
        return self

    def extend(self, values):
        for v in values:
            self.append(v)
        return self

    def extra_repr(self):
        return ", ".join(f"({k}): {p!r}" for k, p in self._parameters.items())


class ParameterDict(_NamedDict):
    """Parameters by name, in insertion order (torch.nn.ParameterDict); arrays given are
    wrapped as Parameters."""

    _REG = "_parameters"
    _WHAT = "parameter"

    def __init__(self, parameters=None):
        super().__init__(parameters)

    def __setitem__(self, key, value):
        self._check_key(key)
        setattr(self, key, _as_parameter(value, "ParameterDict"))

    def get(self, key, default=None):
        return self._parameters.get(key, default)

    def extra_repr(self):
        return ", ".join(f"({k}): {p!r}" for k, p in self._parameters.items())
