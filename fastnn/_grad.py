"""Gradient mode: whether training-mode module calls keep a cache for backward.

Per thread, like torch: ``no_grad`` in one thread never changes what another thread's
modules keep.  Modules read one thread-local slot, ``_tls.rec``, in their forward:

    None   caches are kept (the default; the fast path is one attribute read)
    False  no caches are kept (inside ``no_grad``)
    list   caches are kept and also recorded in that list (``Module.call`` builds a
           per-call handle from it)
"""
import functools
import threading

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "inference_mode"]


class _State(threading.local):
    rec = None           # class attribute: every new thread starts with caching on


_tls = _State()


def is_grad_enabled():
    """True unless this thread is inside ``no_grad`` (or ``set_grad_enabled(False)``)."""
    return _tls.rec is not False


class _GradMode:
    """A context manager that is also a decorator (``@no_grad()`` or ``@no_grad``)."""

    _enable = True

    def __new__(cls, func=None):
        self = super().__new__(cls)
        self._saved = []
        if func is not None:          # bare ``@no_grad`` on a function
            return self(func)
        return self

    def __enter__(self):
        self._saved.append(_tls.rec)
        if not self._enable:
            _tls.rec = False
        elif _tls.rec is False:
            _tls.rec = None
        return None

    def __exit__(self, *exc):
        _tls.rec = self._saved.pop()
        return False

    def __call__(self, func):
        if not callable(func):
            raise TypeError(f"{type(self).__name__}() decorates a function, got {type(func).__name__}")
        mode = type(self)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with mode():
                return func(*args, **kwargs)
        return wrapper


class no_grad(_GradMode):
    """Inside ``with fastnn.no_grad():`` (or a function decorated with ``@fastnn.no_grad()``)
    modules keep no cache for backward, in this thread only: inference without the memory
    of training-mode caches, whatever ``module.training`` says."""

    _enable = False


class enable_grad(_GradMode):
    """Turns caching back on inside a ``no_grad`` region (this thread)."""

    _enable = True


class set_grad_enabled(_GradMode):
    """``set_grad_enabled(False)`` is ``no_grad()``; as a plain call it sets the mode for this
    thread until changed (like torch)."""

    def __new__(cls, mode):
        self = object.__new__(cls)
        self._saved = [_tls.rec]
        self._enable = bool(mode)
        _tls.rec = None if mode and _tls.rec is False else (_tls.rec if mode else False)
        return self

    def __enter__(self):
        return None     # the mode was set by the constructor; __exit__ restores it

    def __call__(self, func):
        _tls.rec = self._saved[0]      # used as a decorator: undo the constructor's switch
        enable = self._enable

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(enable):
                return func(*args, **kwargs)
        return wrapper


class inference_mode(_GradMode):
    """torch.inference_mode(mode=True): ``no_grad`` here (fastnn has no version counters or
    views to skip, so the two are the same); ``inference_mode(False)`` turns caching back
    on, as ``enable_grad``.  A context manager and a decorator (``@inference_mode()`` or
    bare ``@inference_mode``), this thread only."""

    _enable = False

    def __new__(cls, mode=True):
        if callable(mode) and not isinstance(mode, bool):     # bare @inference_mode
            return super().__new__(cls, mode)
        self = super().__new__(cls)
        self._enable = not bool(mode)
        return self

    def __call__(self, func):
        if not callable(func):
            raise TypeError(f"inference_mode() decorates a function, got {type(func).__name__}")
        mode = not self._enable

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with inference_mode(mode):
                return func(*args, **kwargs)
        return wrapper
