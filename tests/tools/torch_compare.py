"""Deep equality of what torch.load returns, for tests run by any torch (Debian 12's 1.13, the ecosystem's 2.14).

same_value(a, b, where): the same structure (dict keys in order, list and tuple lengths, objects by class name and
attributes) and tensors of the same dtype, shape and bytes (their Python attributes, like DeepSpeed's ds_id,
aside); with requires_grad=True their requires_grad too. Raises AssertionError naming where they differ.
"""
import torch


def same_value(a, b, where="", requires_grad=False):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor), where
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
        if requires_grad:
            assert a.requires_grad == b.requires_grad, f"{where}: requires_grad {a.requires_grad} vs {b.requires_grad}"
        as_bytes = lambda t: t.detach().contiguous().reshape(-1).view(torch.uint8)  # noqa: E731
        assert torch.equal(as_bytes(a), as_bytes(b)), f"{where}: values differ"
    elif isinstance(a, dict):
        assert type(a) is type(b) if requires_grad else isinstance(b, dict), \
            f"{where}: {type(a).__name__} vs {type(b).__name__}"
        assert list(a) == list(b), f"{where}: keys {list(a)} vs {list(b)}"
        for k in a:
            same_value(a[k], b[k], f"{where}[{k!r}]", requires_grad)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{where}: {type(a).__name__} of {len(a)}"
        for i, (x, y) in enumerate(zip(a, b)):
            same_value(x, y, f"{where}[{i}]", requires_grad)
    elif hasattr(a, "__dict__") and not isinstance(a, type):
        assert type(a).__name__ == type(b).__name__, where
        same_value(vars(a), vars(b), where, requires_grad)
    else:
        assert a == b or (a != a and b != b), f"{where}: {a!r} vs {b!r}"
