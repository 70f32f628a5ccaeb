"""Writes packages/engine/fixtures/: tiny HF-layout models with float64 reference logits (prefill, KV-cache
decode, batch), LoRA GRPO fixtures (five loss variants with autograd gradients) and one AdamW step.

Run from the repo root with Debian's torch: /usr/bin/python3 scripts/fixtures.py   (spec: scripts/FIXTURES.md)
"""

import json
import os
import sys

sys.dont_write_bytecode = True  # keep scripts/fixtures/ free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from fixtures import adamw, grpo, sft, st  # noqa: E402
from fixtures.dump import dump_json  # noqa: E402
from fixtures.model import Model, adapter_config, init_lora, init_weights  # noqa: E402
from fixtures.model import LORA_TARGETS, llama_config, qwen2_config, qwen3_config  # noqa: E402

OUT = os.path.join("packages", "engine", "fixtures")
F64 = torch.float64
LORA_R, LORA_ALPHA = 4, 8
MODELS = {  # name: (config, weight seed, dtype on disk)
    "llama-tiny": (llama_config(), 1, "F32"),
    "qwen2-tiny": (qwen2_config(), 2, "F32"),
    "qwen3-tiny": (qwen3_config(), 3, "F32"),
    "qwen3-tiny-bf16": (qwen3_config("bfloat16"), 3, "BF16"),  # the same draws as qwen3-tiny, rounded to bf16
}
GRPO = {"grpo-qwen3": ("qwen3-tiny", 13), "grpo-llama": ("llama-tiny", 11)}  # name: (base model, seed)
# The same, with allowed sets (a constrained sampler's masks) on about half of the assistant positions.
GRPO_ALLOWED = {"grpo-qwen3-allowed": ("qwen3-tiny", 17)}
ALLOWED_VARIANTS = ("art", "gspo", "cispo")
written: list[str] = []


def path(*parts: str) -> str:
    return os.path.join(OUT, *parts)


def write_json(p: str, obj, hf_style: bool = False) -> None:
    with open(p, "w") as f:
        # config.json / adapter_config.json as HF and PEFT write them: indent 2, sorted keys
        f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n" if hf_style else dump_json(obj) + "\n")
    written.append(p)


def write_st(p: str, tensors: dict, dtype: str) -> None:
    st.save(p, tensors, dtype)
    written.append(p)


# ---- models and their reference logits ----


def model_fixture(name: str) -> None:
    cfg, seed, dtype = MODELS[name]
    os.makedirs(path(name), exist_ok=True)
    write_json(path(name, "config.json"), cfg, hf_style=True)
    write_st(path(name, "model.safetensors"), init_weights(cfg, seed), dtype)
    model = Model(cfg, st.load(path(name, "model.safetensors")))  # the reference uses exactly the stored values

    rng = np.random.default_rng(100 + seed)
    V = cfg["vocab_size"]
    ids = rng.integers(0, V, 12).tolist()
    hidden: list = []
    with torch.no_grad():
        prefill = model.forward(ids, hidden=hidden)  # (T, V)
        cache: list = []
        rows = [model.forward(ids[:5], cache)[-1]]  # prompt of 5, then 6 tokens one at a time
        for tok in ids[5:11]:
            rows.append(model.forward([tok], cache)[0])
        decode = torch.stack(rows)  # (7, V): logits at positions 4..10
        batch_ids = [rng.integers(0, V, 7).tolist(), rng.integers(0, V, 4).tolist()]
        batch = [model.forward(s) for s in batch_ids]
    assert (decode - prefill[4:11]).abs().max() < 1e-12, "KV-cache decode differs from prefill"
    assert prefill.std() > 0.3, "logits are degenerate"

    write_st(
        path(name, "reference.safetensors"),
        {
            "prefill.logits": prefill,
            "prefill.hidden": torch.stack(hidden),  # (layers + 1, T, C): embeddings, then after each layer
            "decode.logits": decode,
            "batch.0.logits": batch[0],
            "batch.1.logits": batch[1],
        },
        "F32",
    )
    write_json(
        path(name, "reference.json"),
        {
            "model": name,
            "tensors": "reference.safetensors",
            "prefill": {"ids": ids, "logits": "prefill.logits", "hidden": "prefill.hidden"},
            "decode": {
                "prompt": ids[:5],
                "steps": ids[5:11],
                "logits": "decode.logits",
                "positions": list(range(4, 11)),
            },
            "batch": {"sequences": batch_ids, "logits": ["batch.0.logits", "batch.1.logits"]},
        },
    )


# ---- LoRA GRPO ----


def lora_model(base: str, lora: dict | None) -> Model:
    return Model(MODELS[base][0], st.load(path(base, "model.safetensors")), lora, LORA_ALPHA / LORA_R)


def new_logprobs(model: Model, groups) -> list:
    return [[grpo.token_logprobs(model, t["ids"], t.get("allowed")) for t in g] for g in groups]


def grpo_fixture(name: str) -> None:
    allowed = name in GRPO_ALLOWED
    base, seed = (GRPO_ALLOWED if allowed else GRPO)[name]
    cfg = MODELS[base][0]
    os.makedirs(path(name), exist_ok=True)
    write_json(path(name, "adapter_config.json"), adapter_config(base, LORA_R, LORA_ALPHA), hf_style=True)
    write_st(path(name, "adapter_model.safetensors"), init_lora(cfg, seed, LORA_R), "F32")
    lora = {k: v.requires_grad_(True) for k, v in st.load(path(name, "adapter_model.safetensors")).items()}
    policy, ref = lora_model(base, lora), lora_model(base, None)

    groups = grpo.make_trajectories(cfg["vocab_size"], seed)
    if allowed:
        grpo.add_allowed(groups, cfg["vocab_size"], seed)
    grpo.add_logprobs(groups, policy, ref, seed)
    for g in groups:
        for t in g:
            t.pop("sampler_full", None)
    advs = [grpo.advantages(r) for r in grpo.REWARDS]
    write_json(
        path(name, "inputs.json"),
        {
            "base_model": base,
            "adapter": "adapter_model.safetensors",
            "lora": {"r": LORA_R, "alpha": LORA_ALPHA, "scale": LORA_ALPHA / LORA_R, "target_modules": LORA_TARGETS},
            "temperature": 1.0,
            "groups": [
                {"rewards": r, "advantages": a, "trajectories": g} for r, a, g in zip(grpo.REWARDS, advs, groups)
            ],
        },
    )

    names = sorted(lora)
    variants = {}
    for vname, var in grpo.VARIANTS.items():
        if allowed and vname not in ALLOWED_VARIANTS:
            continue
        new = new_logprobs(policy, groups)
        loss, stats, per_token = grpo.variant_loss(var, groups, advs, new)
        grads = torch.autograd.grad(loss, [lora[k] for k in names])
        assert all(g.abs().max() > 0 for g in grads), f"{vname}: a LoRA tensor got no gradient"
        write_st(path(name, f"grads-{vname}.safetensors"), dict(zip(names, grads)), "F32")
        variants[vname] = {"config": var, **stats, "grads": f"grads-{vname}.safetensors", "per_token": per_token}
        print(f"  {name} {vname:8s} loss {stats['loss']:+.6f} kl {stats['kl']:.3e} clip {stats['clip_fraction']:.3f}")
    for vname in ("art", "gspo", "cispo") if allowed else ("art", "token", "gspo", "cispo"):
        assert 0 < variants[vname]["clip_fraction"] < 1, f"{vname}: clipping should be active for some tokens only"
    with torch.no_grad():
        lp = new_logprobs(policy, groups)
    write_json(
        path(name, "reference.json"),
        {
            "base_model": base,
            "new_logprobs": [[x.tolist() for x in g] for g in lp],
            "trainable": [[a != 0.0 for a in ag] for ag in advs],
            "variants": variants,
        },
    )


# ---- self-test: everything re-read from disk ----


def self_test() -> None:
    for name in MODELS:
        ref = json.load(open(path(name, "reference.json")))
        t = st.load(path(name, "reference.safetensors"))
        model = Model(json.load(open(path(name, "config.json"))), st.load(path(name, "model.safetensors")))
        with torch.no_grad():
            prefill = model.forward(ref["prefill"]["ids"])
            cache: list = []
            rows = [model.forward(ref["decode"]["prompt"], cache)[-1]]
            rows += [model.forward([tok], cache)[0] for tok in ref["decode"]["steps"]]
        assert (torch.stack(rows) - prefill[4:11]).abs().max() < 1e-12, f"{name}: decode != prefill rows"
        assert (t["decode.logits"] - t["prefill.logits"][4:11]).abs().max() < 1e-5, name
        assert (prefill - t["prefill.logits"]).abs().max() < 1e-5, f"{name}: stored logits differ"
    w32 = st.load(path("qwen3-tiny", "model.safetensors"))
    w16 = st.load(path("qwen3-tiny-bf16", "model.safetensors"))
    assert all(torch.equal(w16[k], w32[k].float().bfloat16().double()) for k in w32), "bf16 is not RNE of f32"

    # Gradients against central finite differences on one LoRA A and one LoRA B entry: variant 1 (art) and the
    # other PPO variants (CISPO's detached weight makes its gradient differ from the loss's derivative).
    checks = [(g, v) for g in GRPO.items() for v in ("art", "token", "dr_grpo", "gspo")]
    checks += [(g, v) for g in GRPO_ALLOWED.items() for v in ("art", "gspo")]
    for (name, (base, _)), vname in checks:
        inp = json.load(open(path(name, "inputs.json")))
        groups = [g["trajectories"] for g in inp["groups"]]
        advs = [g["advantages"] for g in inp["groups"]]
        lora = st.load(path(name, "adapter_model.safetensors"))
        grads = st.load(path(name, f"grads-{vname}.safetensors"))
        var = grpo.VARIANTS[vname]
        sg_old = name not in GRPO_ALLOWED
        if not sg_old:
            # old = sg(new) has the value of new wherever it is evaluated: hold it at the unperturbed new instead,
            # so the loss's finite differences see the gradient autograd took through new.
            with torch.no_grad():
                at = new_logprobs(lora_model(base, lora), groups)
            for g, lg in zip(groups, at):
                for t, lp in zip(g, lg):
                    t["old_logprobs"] = [x if a is None else y for x, y, a in zip(t["old_logprobs"], lp.tolist(), t["allowed"])]
        for key in ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
                    "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"):
            idx = int(grads[key].abs().argmax())
            h, fs = 1e-5, []
            for sgn in (1, -1):
                pert = {k: v.clone() for k, v in lora.items()}
                pert[key].view(-1)[idx] += sgn * h
                with torch.no_grad():
                    new = new_logprobs(lora_model(base, pert), groups)
                    loss, _, _ = grpo.variant_loss(var, groups, advs, new, sg_old=sg_old)
                fs.append(loss.item())
            fd = (fs[0] - fs[1]) / (2 * h)
            g = grads[key].view(-1)[idx].item()
            where = f"{name} {vname} {key.split('model.layers.')[1]}[{idx}]"
            assert abs(fd - g) <= 1e-6 * abs(g) + 1e-9, f"{where}: autograd {g} vs finite diff {fd}"
            print(f"  finite diff {where}: autograd {g:+.8e} fd {fd:+.8e}")
    print("self-test passed: decode == prefill rows, stored logits, bf16 rounding, PPO gradients vs finite diff")


def main() -> None:
    torch.set_num_threads(1)  # deterministic reductions
    for name in MODELS:
        model_fixture(name)
    for name in [*GRPO, *GRPO_ALLOWED]:
        grpo_fixture(name)
    write_json(path("adamw.json"), adamw.fixture())
    write_json(path("sft.json"), {n: sft.fixture(MODELS[n][0], st.load(path(n, "model.safetensors")), 40 + i) for i, n in enumerate(["llama-tiny", "qwen2-tiny", "qwen3-tiny"])})
    total = 0
    for p in written:
        total += os.path.getsize(p)
        print(f"wrote {p} ({os.path.getsize(p) / 1024:.1f} KiB)")
    print(f"total {total / 1024:.1f} KiB")
    self_test()


if __name__ == "__main__":
    main()
