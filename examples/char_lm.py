"""Train a tiny GPT (a character-level language model) on a few public-domain poems and print a sample.

    python3 -m pip install -e . -e plugins/tinycore_clang && python3 examples/char_lm.py

The model: token + position embeddings, ``--layers`` transformer blocks (pre-LayerNorm, causal multi-head
self-attention through `Tensor.scaled_dot_product_attention`, a GELU MLP), a final LayerNorm and a linear head onto
the characters. It trains with AdamW; the whole training step (forward, backward, optimizer update) is one `TinyJit`,
so after two calls every step replays the captured kernels. The loss is printed every ``--print-every`` steps, then
``--sample-tokens`` characters are generated (sampled with ``--temperature`` and a fixed seed; 0 is greedy).
The default run takes about a minute on two CPU cores (CLANG); ``--device`` (or ``DEV=``) picks another device.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from tinycore import nn
from tinycore.device import Device
from tinycore.engine.jit import TinyJit
from tinycore.nn.state import get_parameters
from tinycore.tensor import Tensor

DATA = Path(__file__).resolve().parent / "data" / "poems.txt"


class Block:
    """One transformer block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``."""

    def __init__(self, dim: int, heads: int) -> None:
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def attention(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        # (B, T, 3C) -> three (B, heads, T, head_dim) tensors
        qkv = self.qkv(x).reshape(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        out = q.scaled_dot_product_attention(k, v, is_causal=True)  # softmax(q k^T / sqrt(d) + causal mask) v
        return self.proj(out.transpose(1, 2).reshape(b, t, c))

    def __call__(self, x: Tensor) -> Tensor:
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(self.fc1(self.ln2(x)).gelu())


class GPT:
    """Characters ``(B, T)`` int32 -> logits ``(B, T, vocab)``."""

    def __init__(self, vocab: int, block_size: int, dim: int, layers: int, heads: int) -> None:
        self.block_size = block_size
        self.tok_emb, self.pos_emb = nn.Embedding(vocab, dim), nn.Embedding(block_size, dim)
        self.blocks = [Block(dim, heads) for _ in range(layers)]
        self.ln_f, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def __call__(self, idx: Tensor) -> Tensor:
        pos = Tensor.arange(idx.shape[1], dtype=idx.dtype, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        return self.head(self.ln_f(x.sequential(self.blocks)))


def generate(model: GPT, prompt: list[int], n: int, temperature: float, rng: np.random.Generator) -> list[int]:
    """`n` more characters after `prompt`. The window is always ``block_size`` long (right-padded while the text is
    shorter: causal attention never looks ahead), so one jitted forward serves every step."""
    forward = TinyJit(lambda idx: model(idx).realize())
    out = list(prompt)
    for _ in range(n):
        ctx = out[-model.block_size :]
        window = np.zeros((1, model.block_size), dtype=np.int32)
        window[0, : len(ctx)] = ctx
        logits = forward(Tensor(window)).numpy()[0, len(ctx) - 1].astype(np.float64)
        if temperature <= 0:
            out.append(int(logits.argmax()))
            continue
        p = np.exp((logits - logits.max()) / temperature)
        out.append(int(rng.choice(len(p), p=p / p.sum())))
    return out[len(prompt) :]


def main(argv: list[str] | None = None) -> int:
    """Train, print the loss curve and a sample; returns 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--block-size", type=int, default=32, help="context length in characters")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--print-every", type=int, default=25)
    ap.add_argument("--sample-tokens", type=int, default=200)
    ap.add_argument("--temperature", type=float, default=0.8, help="0: greedy decoding")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="default: DEV= or the best available device")
    ap.add_argument("--data", type=Path, default=DATA, help="a UTF-8 text file")
    args = ap.parse_args(argv)
    if args.dim % args.heads:
        ap.error(f"--dim {args.dim} is not a multiple of --heads {args.heads}")
    if args.device:
        Device.DEFAULT = args.device

    text = args.data.read_text(encoding="utf-8")
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    data = np.array([stoi[ch] for ch in text], dtype=np.int32)
    if len(data) <= args.block_size + 1:
        raise SystemExit(f"{args.data} is too short for --block-size {args.block_size}")

    Tensor.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    model = GPT(len(chars), args.block_size, args.dim, args.layers, args.heads)
    params = get_parameters(model)
    opt = nn.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)
    print(
        f"{len(text)} characters, vocabulary {len(chars)}; {args.layers} layers, dim {args.dim}, {args.heads} heads, "
        f"{sum(p.numel() for p in params)} parameters; device {params[0].device}"
    )

    @TinyJit
    def train_step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y).backward()
        opt.step()
        return loss.realize()

    def batch() -> tuple[Tensor, Tensor]:
        starts = rng.integers(0, len(data) - args.block_size - 1, args.batch_size)
        rows = np.stack([data[s : s + args.block_size + 1] for s in starts])
        return Tensor(rows[:, :-1].copy()), Tensor(rows[:, 1:].copy())

    start = time.perf_counter()
    first = last = float("nan")
    with Tensor.train():
        for step in range(1, args.steps + 1):
            loss = train_step(*batch())
            if step == 1 or step % args.print_every == 0 or step == args.steps:
                last = loss.item()
                first = last if step == 1 else first
                print(f"step {step:4d}  loss {last:.4f}  ({time.perf_counter() - start:.1f} s)", flush=True)
    print(f"first loss {first:.4f}  final loss {last:.4f}  ({time.perf_counter() - start:.1f} s)")

    prompt = [stoi["\n"]]  # start at a line break
    with Tensor.test():
        sample = generate(model, prompt, args.sample_tokens, args.temperature, np.random.default_rng(args.seed))
    print("sample:\n" + "".join(chars[i] for i in sample))
    return 0


if __name__ == "__main__":
    sys.exit(main())
