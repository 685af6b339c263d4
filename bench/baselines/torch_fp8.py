"""fp8 linears for the PyTorch baselines (torch_gpt2.py --fp8): each product of a linear layer is a
torch._scaled_mm of fp8 operands with per-tensor scales taken from each tensor's amax at that moment
(current, "tensorwise" scaling, as torchao's float8 training recipe): the input and the weight in
e4m3, the output's gradient in e5m2 (Megatron's "hybrid" format), fp32 accumulation, bf16 outputs
(the weight's gradient too, as a bf16 linear under autocast returns it).
The forward uses the fast accumulation, the two gradients the precise one (Transformer Engine's and
megatron.c's choice). The bias gradient is the column sum of the bf16 gradient.

torch._scaled_mm(a, b) takes a row-major (M, K) and a column-major (K, N); the fp8 copies the
backward needs in the other orientation are transposed copies (torch.compile fuses the casts and
the transposes into its kernels).

    swap_linears(module)    replaces every nn.Linear inside `module` (in place) by an Fp8Linear
                            with the same parameters
"""
import torch
import torch.nn as nn

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def to_fp8(t, dtype):
    """t's fp8 bytes scaled by max / amax (saturating), and the inverse scale (fp32 scalar)."""
    top = torch.finfo(dtype).max
    amax = t.detach().abs().amax().float().clamp(min=1e-12)
    scale = top / amax
    q = (t.float() * scale).clamp(-top, top).to(dtype)
    return q, scale.reciprocal()


def col_major(t):
    """The same matrix laid out column-major (what _scaled_mm's second operand must be)."""
    return t.t().contiguous().t()


class _Fp8Matmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        xq, xs = to_fp8(x2, E4M3)
        wq, ws = to_fp8(w, E4M3)
        y = torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws, bias=b, out_dtype=torch.bfloat16,
                             use_fast_accum=True)
        ctx.save_for_backward(xq, xs, wq, ws)
        ctx.has_bias = b is not None
        return y.view(*shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, gy):
        xq, xs, wq, ws = ctx.saved_tensors
        g2 = gy.reshape(-1, gy.shape[-1])
        gq, gs = to_fp8(g2, E5M2)
        # dx (M, K) = g (M, N) . w (N, K); dw (N, K) = g^T (N, M) . x (M, K)
        dx = torch._scaled_mm(gq, col_major(wq), scale_a=gs, scale_b=ws, out_dtype=torch.bfloat16)
        dw = torch._scaled_mm(gq.t().contiguous(), col_major(xq), scale_a=gs, scale_b=xs,
                              out_dtype=torch.bfloat16)
        db = g2.sum(0) if ctx.has_bias else None
        return dx.view(*gy.shape[:-1], wq.shape[1]), dw, db


class Fp8Linear(nn.Linear):
    """nn.Linear whose product runs in fp8 (module docstring); the parameters are nn.Linear's."""

    def forward(self, x):
        w = self.weight.to(torch.bfloat16)
        b = self.bias.to(torch.bfloat16) if self.bias is not None else None
        return _Fp8Matmul.apply(x.to(torch.bfloat16), w, b)


def swap_linears(module):
    """Every nn.Linear under module becomes an Fp8Linear holding the same parameters."""
    for name, child in module.named_children():
        if type(child) is nn.Linear:
            f = Fp8Linear.__new__(Fp8Linear)
            f.__dict__ = child.__dict__  # the same parameters and settings, Fp8Linear's forward
            setattr(module, name, f)
        else:
            swap_linears(child)
