"""Full-parameter SFT of a Llama-form model folder in float32 PyTorch on CPU: the engine's pretraining recipe
(masked next-token loss over the assistant tokens, AdamW with decay on all but norms, global grad-norm clipping,
warm-up then cosine to 0.1) on sequences written by scripts/pretrain/email-sequences.ts. The engine's FullTrainer
follows the same steps (packages/engine/src/train/sft.test.ts checks it against scripts/fixtures/sft.py); this runs
them ~50x faster on 2 cores than the engine on SwiftShader, for the long email pretraining (models/README.md).

  python3 scripts/pretrain/torch_sft.py --model DIR --data A.bin [--data B.bin] --val V.bin --out DIR2 --minutes M

It copies DIR's tokenizer and config files to DIR2 (the config resized by --hidden/--heads/--kv-heads/--layers/
--ffn), starts from DIR's weights when the shapes match and --init is given (else seeded random, N(0, 0.02)), and
writes DIR2/model.safetensors (f32, HF names) at every evaluation. Each evaluation prints the loss on --val and, per
assistant turn (1st, 2nd, 3rd call), the share of turns whose every token is the argmax under teacher forcing: the
turns the model would write exactly at temperature 0.
"""

import argparse
import json
import math
import os
import shutil
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F



def st_load(path):
    """model.safetensors (F32 or BF16 tensors) as float32 tensors by name."""
    data = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[8 + n + a : 8 + n + b]
        if info["dtype"] == "F32":
            t = torch.frombuffer(bytearray(raw), dtype=torch.float32)
        elif info["dtype"] == "BF16":
            t = torch.frombuffer(bytearray(raw), dtype=torch.bfloat16).float()
        else:
            raise ValueError(f"{path}: tensor {name} has dtype {info['dtype']}; expected F32 or BF16")
        out[name] = t.reshape(info["shape"])
    return out


def st_save(path, tensors):
    """Writes f32 tensors sorted by name (8-byte header length, JSON header padded to 8, raw little-endian data),
    through a temporary file so a stopped run never leaves a half-written model."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        b = tensors[name].detach().float().contiguous().numpy().astype("<f4", copy=False).tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def read_bin(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack_from("<I", data, 0)
    lens = np.frombuffer(data, dtype="<u4", count=n, offset=4)
    total = int(lens.sum())
    ids = np.frombuffer(data, dtype="<u2", count=total, offset=4 + 4 * n).astype(np.int64)
    mask = np.frombuffer(data, dtype=np.uint8, count=total, offset=4 + 4 * n + 2 * total)
    out, o = [], 0
    for L in lens:
        out.append((ids[o : o + L], mask[o : o + L]))
        o += int(L)
    return out


class Llama(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        C, H, KV, D, Fw, V = (cfg[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size"))
        self.H, self.KV, self.D = H, KV, D
        p = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
        for i in range(cfg["num_hidden_layers"]):
            L = f"model.layers.{i}."
            p[L + "input_layernorm.weight"] = (C,)
            p[L + "post_attention_layernorm.weight"] = (C,)
            p[L + "self_attn.q_proj.weight"] = (H * D, C)
            p[L + "self_attn.k_proj.weight"] = (KV * D, C)
            p[L + "self_attn.v_proj.weight"] = (KV * D, C)
            p[L + "self_attn.o_proj.weight"] = (C, H * D)
            p[L + "mlp.gate_proj.weight"] = (Fw, C)
            p[L + "mlp.up_proj.weight"] = (Fw, C)
            p[L + "mlp.down_proj.weight"] = (C, Fw)
        self.shapes = p
        self.w = torch.nn.ParameterDict({k.replace(".", "__"): torch.nn.Parameter(torch.empty(s)) for k, s in p.items()})
        inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
        pos = torch.arange(cfg["max_position_embeddings"], dtype=torch.float64)
        ang = torch.outer(pos, inv)
        emb = torch.cat([ang, ang], -1)
        self.register_buffer("cos", emb.cos().float(), persistent=False)
        self.register_buffer("sin", emb.sin().float(), persistent=False)

    def get(self, k):
        return self.w[k.replace(".", "__")]

    def init(self, seed, std=0.02):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for k, s in self.shapes.items():
                t = self.get(k)
                if k.endswith("norm.weight"):
                    t.fill_(1.0)
                else:
                    t.copy_(torch.randn(s, generator=g) * std)

    def load(self, tensors):
        with torch.no_grad():
            for k in self.shapes:
                self.get(k).copy_(tensors[k].float())

    def state(self):
        return {k: self.get(k).detach() for k in self.shapes}

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg["rms_norm_eps"]) * w

    def rope(self, x):
        T = x.shape[2]
        c, s = self.cos[:T], self.sin[:T]
        h = x.shape[-1] // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], -1)
        return x * c + rot * s

    def forward(self, ids):
        B, T = ids.shape
        x = self.get("model.embed_tokens.weight")[ids]
        for i in range(self.cfg["num_hidden_layers"]):
            L = f"model.layers.{i}."
            h = self.rms(x, self.get(L + "input_layernorm.weight"))
            q = (h @ self.get(L + "self_attn.q_proj.weight").T).view(B, T, self.H, self.D).transpose(1, 2)
            k = (h @ self.get(L + "self_attn.k_proj.weight").T).view(B, T, self.KV, self.D).transpose(1, 2)
            v = (h @ self.get(L + "self_attn.v_proj.weight").T).view(B, T, self.KV, self.D).transpose(1, 2)
            q, k = self.rope(q), self.rope(k)
            if self.KV != self.H:
                k = k.repeat_interleave(self.H // self.KV, 1)
                v = v.repeat_interleave(self.H // self.KV, 1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + a.transpose(1, 2).reshape(B, T, -1) @ self.get(L + "self_attn.o_proj.weight").T
            h = self.rms(x, self.get(L + "post_attention_layernorm.weight"))
            g = h @ self.get(L + "mlp.gate_proj.weight").T
            u = h @ self.get(L + "mlp.up_proj.weight").T
            x = x + (F.silu(g) * u) @ self.get(L + "mlp.down_proj.weight").T
        x = self.rms(x, self.get("model.norm.weight"))
        return x @ self.get("model.embed_tokens.weight").T


def copy_sequence(rng, tokens, T=256):
    """A synthetic copying exercise: random spans of the data's tokens, each followed (after a few random tokens)
    by itself again, with the loss on the repeats: what reading an id or a word back from the context needs."""
    ids, mask = [], []
    while len(ids) < T:
        L = int(rng.integers(4, 40))
        x = rng.choice(tokens, L)
        gap = rng.choice(tokens, int(rng.integers(0, 30)))
        ids += list(x) + list(gap) + list(x)
        mask += [0] * (L + len(gap)) + [0] + [1] * (L - 1)
    return np.array(ids[:T], dtype=np.int64), np.array(mask[:T], dtype=np.uint8)


def batch(seqs):
    """Right-padded ids, the assistant mask, and 1 on every real (not padding) token."""
    T = max(len(s[0]) for s in seqs)
    ids = torch.zeros(len(seqs), T, dtype=torch.long)
    m = torch.zeros(len(seqs), T)
    pad = torch.zeros(len(seqs), T)
    for i, (a, b) in enumerate(seqs):
        ids[i, : len(a)] = torch.from_numpy(a)
        m[i, : len(b)] = torch.from_numpy(b.astype(np.float32))
        pad[i, : len(a)] = 1
    return ids, m, pad


def loss_of(model, ids, m, cw=0.0, pad=None):
    """Mean next-token loss weighted 1 on the assistant tokens (m) and cw on the others (not on padding)."""
    if cw > 0:
        m = m + cw * (1 - m) * pad
    logits = model(ids[:, :-1])
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
    w = m[:, 1:].reshape(-1)
    return (nll * w).sum() / w.sum().clamp(min=1), logits


@torch.no_grad()
def evaluate(model, val, bs=8):
    """Validation loss, and per assistant turn the share whose every token is the teacher-forced argmax."""
    tot, wsum = 0.0, 0.0
    exact = {}
    for i in range(0, len(val), bs):
        ids, m, _ = batch(val[i : i + bs])
        loss, logits = loss_of(model, ids, m)
        w = m[:, 1:].sum().item()
        tot += loss.item() * w
        wsum += w
        ok = (logits.argmax(-1) == ids[:, 1:]).numpy()
        mm = m[:, 1:].numpy() > 0
        for b in range(ids.shape[0]):
            turn, t = 0, 0
            L = len(val[i + b][0]) - 1
            while t < L:
                if mm[b, t]:
                    s = t
                    while t < L and mm[b, t]:
                        t += 1
                    exact.setdefault(turn, []).append(bool(ok[b, s:t].all()))
                    turn += 1
                else:
                    t += 1
    return tot / max(wsum, 1), {k: (sum(v) / len(v), len(v)) for k, v in sorted(exact.items())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", action="append", required=True)
    ap.add_argument("--val", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--steps", type=int, help="stop after this many steps, the schedule over them (not --minutes)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--copy", type=float, default=0.0, help="share of each batch that is synthetic copying (copy_sequence)")
    ap.add_argument("--copy-steps", type=int, default=0, help="steps of synthetic copying alone before the data")
    ap.add_argument("--context-weight", type=float, default=0.0,
                    help="loss weight of the tokens that are not the assistant's (tool results, emails, prompts)")
    ap.add_argument("--init", action="store_true", help="start from --model's weights")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--report", help="write the run's steps, minutes and last evaluation here (JSON)")
    for k in ("hidden", "heads", "kv-heads", "layers", "ffn", "head-dim"):
        ap.add_argument("--" + k, type=int)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    unsupported = [f"{k}={cfg.get(k)!r}" for k, ok in (
        ("model_type", cfg.get("model_type") == "llama"), ("rope_scaling", cfg.get("rope_scaling") is None),
        ("attention_bias", not cfg.get("attention_bias")), ("mlp_bias", not cfg.get("mlp_bias")),
        ("tie_word_embeddings", cfg.get("tie_word_embeddings") is True), ("hidden_act", cfg.get("hidden_act") == "silu"),
    ) if not ok]
    if unsupported:
        sys.exit(f"{a.model}/config.json: {', '.join(unsupported)}: torch_sft.py trains Llama models with tied "
                 "embeddings, no biases and no rope_scaling (the models webart pretrain makes)")
    for k, ck in (("hidden", "hidden_size"), ("heads", "num_attention_heads"), ("kv_heads", "num_key_value_heads"),
                  ("layers", "num_hidden_layers"), ("ffn", "intermediate_size"), ("head_dim", "head_dim")):
        if getattr(a, k) is not None:
            cfg[ck] = getattr(a, k)
    os.makedirs(a.out, exist_ok=True)
    if os.path.realpath(a.out) != os.path.realpath(a.model):
        for f in os.listdir(a.model):
            if f not in ("model.safetensors", "config.json") and os.path.isfile(os.path.join(a.model, f)):
                shutil.copy(os.path.join(a.model, f), os.path.join(a.out, f))
    json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    model = Llama(cfg)
    if a.init:
        model.load(st_load(os.path.join(a.model, "model.safetensors")))
    else:
        model.init(a.seed)
    n_params = sum(p.numel() for p in model.parameters())
    data = [s for p in a.data for s in read_bin(p)]
    val = read_bin(a.val)
    print(f"{n_params} parameters; {len(data)} training sequences ({sum(len(s[0]) for s in data)} tokens); {len(val)} validation", flush=True)
    decay = [p for k, p in model.w.items() if not k.endswith("norm__weight")]
    nodecay = [p for k, p in model.w.items() if k.endswith("norm__weight")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.99), eps=1e-8)
    rng = np.random.default_rng(a.seed + 2)
    tokens = np.unique(np.concatenate([s[0] for s in data[:2000]]))
    order, step, t0 = [], 0, time.time()
    done = False
    n_copy = int(round(a.copy * a.batch))
    while not done:
        if len(order) < a.batch:
            order = list(rng.permutation(len(data)))
        copy_only = step < a.copy_steps
        k = 0 if copy_only else a.batch - n_copy
        idx, order = order[:k], order[k:]
        # Sort by length so padding is small: the batch is drawn at random, then split in two by length.
        extra = [copy_sequence(rng, tokens) for _ in range(a.batch if copy_only else n_copy)]
        seqs = sorted([data[i] for i in idx] + extra, key=lambda s: len(s[0]))
        step += 1
        frac = (step - 1) / a.steps if a.steps else min(1.0, (time.time() - t0) / 60 / a.minutes)
        lr = a.lr * min(1.0, step / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad()
        half = [seqs[: len(seqs) // 2], seqs[len(seqs) // 2 :]]
        cw = a.context_weight
        wtot = sum(float(s[1][1:].sum()) + cw * float((1 - s[1][1:]).sum()) for s in seqs)
        ltot = 0.0
        for part in half:
            if not part:
                continue
            ids, m, pad = batch(part)
            w = (m + cw * (1 - m) * pad)[:, 1:].sum()
            loss, _ = loss_of(model, ids, m, cw, pad)
            (loss * w / wtot).backward()
            ltot += loss.item() * w.item() / wtot
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        done = step >= a.steps if a.steps else (time.time() - t0) / 60 >= a.minutes
        if step % 20 == 0:
            print(f"step {step} loss {ltot:.4f} grad {gn:.3f} lr {lr:.2e} {(time.time() - t0) / step:.2f}s/step", flush=True)
        if step % a.eval_every == 0 or done:
            vl, ex = evaluate(model, val)
            turns = " ".join(f"turn{k + 1} {r:.2f}" for k, (r, n) in ex.items() if n >= 20)
            print(f"eval step {step} ({(time.time() - t0) / 60:.1f} min): val loss {vl:.4f}; exact {turns}", flush=True)
            st_save(os.path.join(a.out, "model.safetensors"), model.state())
    if a.report:
        exact = {f"turn{k + 1}": r for k, (r, n) in ex.items()}
        json.dump({"steps": step, "minutes": round((time.time() - t0) / 60, 1), "val_loss": vl, "exact": exact},
                  open(a.report, "w"))


if __name__ == "__main__":
    main()
