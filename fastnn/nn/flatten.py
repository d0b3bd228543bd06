"""Shape modules: Flatten and Unflatten (torch.nn's), views whose backward reshapes back."""

from .._validate import grad_like, int_arg, is_int, norm_dim
from .module import Module

__all__ = ["Flatten", "Unflatten"]


def _shape(x):
    return tuple(int(s) for s in x.shape)


def _reshape_back(grad_output, ctx):
    in_shape, out_shape, dtype = ctx
    return grad_like(grad_output, out_shape, dtype).reshape(in_shape)


class Flatten(Module):
    """torch.nn.Flatten(start_dim=1, end_dim=-1): dims start_dim..end_dim merged into one."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim = int_arg(start_dim, "start_dim")
        self.end_dim = int_arg(end_dim, "end_dim")

    def forward(self, input):
        shape = _shape(input)
        nd = len(shape)
        s = norm_dim(self.start_dim, nd, "start_dim")
        e = norm_dim(self.end_dim, nd, "end_dim")
        if s > e:
            raise ValueError(f"start_dim ({self.start_dim}) comes after end_dim ({self.end_dim}) "
                             f"for an input of {nd} dimensions")
        if nd == 0:
            out_shape = (1,)
        else:
            n = 1
            for d in shape[s:e + 1]:
                n *= d
            out_shape = shape[:s] + (n,) + shape[e + 1:]
        self._keep((shape, out_shape, input.dtype))
        return input.reshape(out_shape)

    def backward(self, grad_output):
        return _reshape_back(grad_output, self._take())

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """torch.nn.Unflatten(dim, unflattened_size): dim ``dim`` split into ``unflattened_size``
    (one entry may be -1)."""

    def __init__(self, dim, unflattened_size):
        super().__init__()
        int_arg(dim, "dim")
        if isinstance(unflattened_size, (str, bytes)) or not hasattr(unflattened_size, "__iter__"):
            raise TypeError(f"unflattened_size must be a tuple or list of ints, got "
                            f"{type(unflattened_size).__name__}")
        sizes = tuple(unflattened_size)
        for v in sizes:
            if not is_int(v) or v < -1:
                raise ValueError(f"unflattened_size must hold ints >= 0 (or one -1), got {sizes}")
        if sum(1 for v in sizes if v == -1) > 1 or not sizes:
            raise ValueError(f"unflattened_size must be non-empty with at most one -1, got {sizes}")
        self.dim, self.unflattened_size = int(dim), tuple(int(v) for v in sizes)

    def forward(self, input):
        shape = _shape(input)
        d = norm_dim(self.dim, len(shape), "dim")
        if not shape:
            raise ValueError("input of Unflatten must have at least one dimension, got a 0-d array")
        sizes = list(self.unflattened_size)
        known = 1
        for v in sizes:
            if v != -1:
                known *= v
        if -1 in sizes:
            if known == 0 or shape[d] % known:
                raise ValueError(f"unflattened_size {self.unflattened_size} does not divide "
                                 f"input.shape[{d}] = {shape[d]}")
            sizes[sizes.index(-1)] = shape[d] // known
        elif known != shape[d]:
            raise ValueError(f"unflattened_size {self.unflattened_size} must multiply to "
                             f"input.shape[{d}] = {shape[d]}")
        out_shape = shape[:d] + tuple(sizes) + shape[d + 1:]
        self._keep((shape, out_shape, input.dtype))
        return input.reshape(out_shape)

    def backward(self, grad_output):
        return _reshape_back(grad_output, self._take())

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
