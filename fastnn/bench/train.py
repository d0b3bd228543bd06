"""End-to-end benchmark: one GPT training step (forward, cross-entropy, backward, AdamW).

Config (the issue's): vocab 65, d_model 128, 4 layers, 4 heads, block 64, batch 16 ->
1,024 tokens per step.  fastnn's GPT (cpu backend) vs the same model on the NumPy
reference backend vs the same architecture in PyTorch (``torch_gpt`` below, GPT-2 naming,
loaded with fastnn's initial weights), each doing the identical step.  tokens/s is
1024 / time; ``flops`` is the usual 6 N + 12 L T d per token estimate.
"""
import numpy as np

from .core import BenchCase, torch_or_none

CONFIG = dict(vocab_size=65, block_size=64, n_layer=4, n_head=4, d_model=128)
BATCH = 16


def torch_gpt(torch, vocab_size, block_size, n_layer, n_head, d_model, tie_weights=True,
              layer_norm_epsilon=1e-5, gelu="tanh"):
    """GPT-2 in PyTorch with the GPT-2 checkpoint's parameter names (Conv1D weights stored
    (nx, nf)), so ``load_state_dict`` takes a fastnn GPT's state dict converted to tensors."""
    nn = torch.nn
    Fn = torch.nn.functional

    class Conv1D(nn.Module):
        def __init__(self, nf, nx):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(nx, nf).normal_(std=0.02))
            self.bias = nn.Parameter(torch.zeros(nf))

        def forward(self, x):
            return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(
                *x.shape[:-1], self.weight.shape[1])

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = Conv1D(3 * d_model, d_model)
            self.c_proj = Conv1D(d_model, d_model)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
            y = Fn.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).reshape(B, T, C))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = Conv1D(4 * d_model, d_model)
            self.c_proj = Conv1D(d_model, 4 * d_model)

        def forward(self, x):
            return self.c_proj(Fn.gelu(self.c_fc(x), approximate=gelu))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(d_model, eps=layer_norm_epsilon)
            self.attn = Attn()
            self.ln_2 = nn.LayerNorm(d_model, eps=layer_norm_epsilon)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab_size, d_model)
            self.wpe = nn.Embedding(block_size, d_model)
            self.h = nn.ModuleList([Block() for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(d_model, eps=layer_norm_epsilon)
            self.lm_head = None if tie_weights else nn.Linear(d_model, vocab_size, bias=False)

        def forward(self, idx):
            T = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(T))
            for b in self.h:
                x = b(x)
            x = self.ln_f(x)
            return x @ self.wte.weight.T if self.lm_head is None else self.lm_head(x)

    return GPT()


def _train_step(threads_note=""):
    def make():
        import fastnn
        from fastnn import nn, optim
        from fastnn.models import GPT
        fastnn.manual_seed(0)
        model = GPT(**CONFIG)
        opt = optim.AdamW(model.parameters(), lr=1e-3)
        crit = nn.CrossEntropyLoss()
        rng = np.random.default_rng(0)
        x = rng.integers(0, CONFIG["vocab_size"], (BATCH, CONFIG["block_size"]))
        y = rng.integers(0, CONFIG["vocab_size"], (BATCH, CONFIG["block_size"]))
        V = CONFIG["vocab_size"]

        def step(m=model, o=opt):
            m.zero_grad()
            logits = m(x)
            crit(logits.reshape(-1, V), y.reshape(-1))
            m.backward(crit.backward().reshape(logits.shape))
            o.step()

        ref_model = GPT(**CONFIG)
        ref_opt = optim.AdamW(ref_model.parameters(), lr=1e-3)

        def reference():
            with fastnn.use_backend("reference"):
                step(ref_model, ref_opt)

        fns = {"fastnn": step, "reference": reference, "torch": None}
        torch = torch_or_none()
        if torch is not None:
            tm = torch_gpt(torch, **CONFIG)
            tm.load_state_dict({k: torch.tensor(v) for k, v in model.state_dict().items()})
            topt = torch.optim.AdamW(tm.parameters(), lr=1e-3)
            tx, ty = torch.tensor(x), torch.tensor(y)

            def t():
                topt.zero_grad(set_to_none=True)
                loss = torch.nn.functional.cross_entropy(tm(tx).view(-1, V), ty.view(-1))
                loss.backward()
                topt.step()
            fns["torch"] = t
        return fns

    n_params = (CONFIG["vocab_size"] + CONFIG["block_size"]) * CONFIG["d_model"] + \
        CONFIG["n_layer"] * (12 * CONFIG["d_model"] ** 2 + 13 * CONFIG["d_model"]) + 2 * CONFIG["d_model"]
    tokens = BATCH * CONFIG["block_size"]
    flops = tokens * (6 * n_params + 12 * CONFIG["n_layer"] * CONFIG["block_size"] * CONFIG["d_model"])
    case = BenchCase("train", "GPT train step (1024 tokens)",
                     "V65 d128 L4 H4 T64 B16 AdamW", make, flops=flops, min_time=1.0, max_reps=50)
    case.tokens = tokens   # the runner reports tokens/s for cases that say how many they do
    return case


def cases():
    return [_train_step()]
