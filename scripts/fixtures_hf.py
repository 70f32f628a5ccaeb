"""Writes the transformers-referenced fixtures under packages/engine/fixtures/: tiny random-weight Mistral, Gemma 3
(text), SmolLM2 and Llama-3.2 models whose config.json copies the real model's fields (only sizes shrunk), with
reference logits from transformers' own classes (MistralForCausalLM, Gemma3ForCausalLM, LlamaForCausalLM) loaded
with from_pretrained in float64, through prefill and KV-cache decode; and a LoRA GRPO fixture on the Gemma 3 model
whose gradients come from torch autograd through HF's Gemma3 with a PEFT LoRA.

Run from the repo root with a Python that has torch, transformers 5 and peft:  python3 scripts/fixtures_hf.py
(spec: scripts/FIXTURES.md). scripts/fixtures.py (plain torch, no transformers) writes the other fixtures.
"""

import json
import os
import sys
import tempfile

sys.dont_write_bytecode = True  # keep scripts/fixtures/ free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import peft  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from fixtures import grpo, st  # noqa: E402
from fixtures.dump import dump_json  # noqa: E402
from fixtures.model import LORA_TARGETS, adapter_config, init_lora  # noqa: E402

OUT = os.path.join("packages", "engine", "fixtures")
F64 = torch.float64
LORA_R, LORA_ALPHA = 4, 8
written: list[str] = []


# ---- configs: the published config.json of each model, sizes shrunk ----


def mistral_config() -> dict:
    """Mistral-7B-v0.3 (no head_dim field, sliding_window null, rope_theta 1e6, untied)."""
    return {
        "architectures": ["MistralForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 96,
        "max_position_embeddings": 32768,
        "model_type": "mistral",
        "num_attention_heads": 8,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.42.0.dev0",
        "use_cache": True,
        "vocab_size": 256,
    }


def mistral_window_config() -> dict:
    """Mistral-7B-v0.1 (sliding_window on every layer, rope_theta 1e4); the window shrunk to 4 tokens so it bites."""
    return {
        "architectures": ["MistralForCausalLM"],
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": 32,
        "initializer_range": 0.02,
        "intermediate_size": 64,
        "max_position_embeddings": 32768,
        "model_type": "mistral",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 1,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "sliding_window": 4,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.34.0.dev0",
        "use_cache": True,
        "vocab_size": 256,
    }


def gemma3_config() -> dict:
    """gemma-3-270m / gemma-3-1b (layer_types, two RoPE bases, tied, GeGLU), with the global layers' linear RoPE
    scaling of the 4B text config; the window shrunk to 4 tokens and query_pre_attn_scalar (= head_dim in the
    small models) set apart from head_dim so that the test can tell them apart."""
    return {
        "_sliding_window_pattern": 3,
        "architectures": ["Gemma3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_logit_softcapping": None,
        "bos_token_id": 2,
        "eos_token_id": [1, 106],
        "final_logit_softcapping": None,
        "head_dim": 16,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 48,
        "initializer_range": 0.02,
        "intermediate_size": 96,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
        "max_position_embeddings": 32768,
        "model_type": "gemma3_text",
        "num_attention_heads": 4,
        "num_hidden_layers": 3,
        "num_key_value_heads": 1,
        "pad_token_id": 0,
        "query_pre_attn_scalar": 24,
        "rms_norm_eps": 1e-06,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "rope_theta": 1000000.0,
        "sliding_window": 4,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.55.0.dev0",
        "use_bidirectional_attention": False,
        "use_cache": True,
        "vocab_size": 256,
    }


def smollm2_config() -> dict:
    """SmolLM2-135M (LlamaForCausalLM, tied, rope_theta 1e5, 9 heads over 3 kv heads, rope_interleaved false)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "hidden_act": "silu",
        "hidden_size": 72,
        "initializer_range": 0.041666666666666664,
        "intermediate_size": 64,
        "is_llama_config": True,
        "max_position_embeddings": 8192,
        "model_type": "llama",
        "num_attention_heads": 9,
        "num_hidden_layers": 2,
        "num_key_value_heads": 3,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_interleaved": False,
        "rope_scaling": None,
        "rope_theta": 100000,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.42.3",
        "use_cache": True,
        "vocab_size": 256,
    }


def llama32_config() -> dict:
    """Llama-3.2-1B (tied, head_dim field, llama3 rope scaling factor 32 from 8192 positions, rope_theta 5e5)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 128000,
        "eos_token_id": 128001,
        "head_dim": 8,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 96,
        "max_position_embeddings": 131072,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": 8,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "factor": 32.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "rope_theta": 500000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.45.0.dev0",
        "use_cache": True,
        "vocab_size": 256,
    }


MODELS = {  # name: (config, weight seed)
    "mistral-tiny": (mistral_config(), 21),
    "mistral-tiny-window": (mistral_window_config(), 22),
    "gemma3-tiny": (gemma3_config(), 23),
    "smollm2-tiny": (smollm2_config(), 24),
    "llama32-tiny": (llama32_config(), 25),
}
GRPO = {"grpo-gemma3": ("gemma3-tiny", 27)}  # name: (base model, seed)


def path(*parts: str) -> str:
    return os.path.join(OUT, *parts)


def write_json(p: str, obj, hf_style: bool = False) -> None:
    with open(p, "w") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n" if hf_style else dump_json(obj) + "\n")
    written.append(p)


def write_st(p: str, tensors: dict, dtype: str = "F32") -> None:
    st.save(p, tensors, dtype)
    written.append(p)


# ---- weights: seeded draws in HF names, from the class's own parameter list ----


def init_weights(cfg: dict, seed: int) -> dict[str, torch.Tensor]:
    """Every parameter of the HF class (built on the meta device) in f32: matrices and embeddings N(0, 0.1); norm
    weights 1 + N(0, 0.1), except Gemma's, stored as w - 1, which are N(0, 0.1). A tied lm_head is left out, as
    save_pretrained does. Drawn in name order with numpy default_rng(seed)."""
    rng = np.random.default_rng(seed)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**cfg))
    tied = model.config.tie_word_embeddings
    gemma = cfg["model_type"] == "gemma3_text"
    out = {}
    for name, p in sorted(model.named_parameters(remove_duplicate=False)):
        if tied and name == "lm_head.weight":
            continue
        mean = 1.0 if name.endswith("norm.weight") and not gemma else 0.0
        out[name] = torch.from_numpy((mean + 0.1 * rng.standard_normal(tuple(p.shape))).astype(np.float32))
    return out


def load(name: str):
    """The fixture's model through from_pretrained (config.json + model.safetensors as written), in float64."""
    model, info = AutoModelForCausalLM.from_pretrained(
        path(name), dtype=F64, attn_implementation="sdpa", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], (name, info)
    if model.config.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "lm_head is not tied"
    return model.eval()


# ---- models and their reference logits ----


def logits(model, ids: list[int], past=None):
    out = model(input_ids=torch.tensor([ids]), past_key_values=past, use_cache=past is not None)
    return out.logits[0], out.past_key_values


def model_fixture(name: str) -> None:
    cfg, seed = MODELS[name]
    os.makedirs(path(name), exist_ok=True)
    write_json(path(name, "config.json"), cfg, hf_style=True)
    write_st(path(name, "model.safetensors"), init_weights(cfg, seed))
    model = load(name)

    rng = np.random.default_rng(100 + seed)
    V = cfg["vocab_size"]
    ids = rng.integers(0, V, 12).tolist()
    hidden: list = []  # the residual stream after the (scaled) embedding and after each layer
    keep = lambda m, i, o: hidden.append((o[0] if isinstance(o, tuple) else o)[0].detach().clone())  # noqa: E731
    hooks = [m.register_forward_hook(keep) for m in [model.model.embed_tokens, *model.model.layers]]
    with torch.no_grad():
        prefill, _ = logits(model, ids)  # (T, V)
        for h in hooks:
            h.remove()
        cache = transformers.DynamicCache(config=model.config)
        first, cache = logits(model, ids[:5], cache)  # prompt of 5, then 6 tokens one at a time
        rows = [first[-1]]
        for tok in ids[5:11]:
            step, cache = logits(model, [tok], cache)
            rows.append(step[0])
        decode = torch.stack(rows)  # (7, V): logits at positions 4..10
        batch_ids = [rng.integers(0, V, 7).tolist(), rng.integers(0, V, 4).tolist()]
        batch = [logits(model, s)[0] for s in batch_ids]
    # Decode computes each row as prefill does (HF's f32 RMSNorm and RoPE angles included): measured ~1e-15 apart.
    err = (decode - prefill[4:11]).abs().max().item()
    assert err < 1e-5, f"{name}: KV-cache decode differs from prefill by {err}"
    assert prefill.std() > 0.3, f"{name}: logits are degenerate"
    std, top = prefill.std().item(), prefill.abs().max().item()
    print(f"  {name}: logits std {std:.3f}, max |.| {top:.3f}, decode vs prefill {err:.1e}")

    write_st(
        path(name, "reference.safetensors"),
        {
            "prefill.logits": prefill,
            "prefill.hidden": torch.stack(hidden),  # (layers + 1, T, C)
            "decode.logits": decode,
            "batch.0.logits": batch[0],
            "batch.1.logits": batch[1],
        },
    )
    write_json(
        path(name, "reference.json"),
        {
            "model": name,
            "reference": f"transformers {transformers.__version__} {cfg['architectures'][0]}, float64, sdpa",
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


# ---- LoRA GRPO through HF's Gemma 3 with a PEFT adapter ----


class Policy:
    """grpo.token_logprobs' interface (forward(ids) -> (T, V) logits) over a PEFT model, adapter on or off."""

    def __init__(self, model, adapter: bool):
        self.model, self.adapter = model, adapter

    def forward(self, ids: list[int]) -> torch.Tensor:
        if self.adapter:
            return self.model(input_ids=torch.tensor([ids])).logits[0]
        with self.model.disable_adapter():
            return self.model(input_ids=torch.tensor([ids])).logits[0]


def peft_model(base: str, lora: dict[str, torch.Tensor]):
    """HF's model with PEFT's LoRA on the seven projections, its A/B set to `lora` (PEFT's saved names)."""
    cfg = peft.LoraConfig(r=LORA_R, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules=LORA_TARGETS, bias="none")
    model = peft.get_peft_model(load(base), cfg)
    state = peft.get_peft_model_state_dict(model)
    assert sorted(state) == sorted(lora), "PEFT's adapter names differ from the fixture's"
    peft.set_peft_model_state_dict(model, {k: v.to(F64) for k, v in lora.items()})
    params = {}
    for n, p in model.named_parameters():
        if "lora_" in n:
            params[n.replace(".default", "")] = p
    assert sorted(params) == sorted(lora)
    for k in lora:
        assert torch.equal(params[k].detach(), lora[k].to(F64)), k
    return model, params


def new_logprobs(policy: Policy, groups) -> list:
    return [[grpo.token_logprobs(policy, t["ids"]) for t in g] for g in groups]


def grpo_fixture(name: str) -> None:
    base, seed = GRPO[name]
    cfg = MODELS[base][0]
    os.makedirs(path(name), exist_ok=True)
    write_json(path(name, "adapter_config.json"), adapter_config(base, LORA_R, LORA_ALPHA), hf_style=True)
    write_st(path(name, "adapter_model.safetensors"), init_lora(cfg, seed, LORA_R))
    lora = st.load(path(name, "adapter_model.safetensors"))
    model, params = peft_model(base, lora)
    policy, ref = Policy(model, True), Policy(model, False)

    groups = grpo.make_trajectories(cfg["vocab_size"], seed)
    grpo.add_logprobs(groups, policy, ref, seed)
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
    names = sorted(params)
    variants = {}
    for vname, var in grpo.VARIANTS.items():
        new = new_logprobs(policy, groups)
        loss, stats, per_token = grpo.variant_loss(var, groups, advs, new)
        grads = torch.autograd.grad(loss, [params[k] for k in names])
        assert all(g.abs().max() > 0 for g in grads), f"{vname}: a LoRA tensor got no gradient"
        write_st(path(name, f"grads-{vname}.safetensors"), dict(zip(names, grads)))
        variants[vname] = {"config": var, **stats, "grads": f"grads-{vname}.safetensors", "per_token": per_token}
        print(f"  {name} {vname:8s} loss {stats['loss']:+.6f} kl {stats['kl']:.3e} clip {stats['clip_fraction']:.3f}")
    for vname in ("art", "token", "gspo", "cispo"):
        assert 0 < variants[vname]["clip_fraction"] < 1, f"{vname}: clipping should be active for some tokens only"
    with torch.no_grad():
        lp = new_logprobs(policy, groups)
    write_json(
        path(name, "reference.json"),
        {
            "base_model": base,
            "reference": f"transformers {transformers.__version__} Gemma3ForCausalLM + peft {peft.__version__} LoRA",
            "new_logprobs": [[x.tolist() for x in g] for g in lp],
            "trainable": [[a != 0.0 for a in ag] for ag in advs],
            "variants": variants,
        },
    )


# ---- self-test: everything re-read from disk ----


class F64Norm:
    """Within `with`, Gemma3RMSNorm normalises in the model's float64 instead of f32 (for finite differences only:
    f32 rounding inside the loss would swamp a central difference)."""

    def __enter__(self):
        cls = transformers.models.gemma3.modeling_gemma3.Gemma3RMSNorm
        self.saved = cls.forward
        cls.forward = lambda self, x: self._norm(x) * (1.0 + self.weight)
        return self

    def __exit__(self, *exc):
        transformers.models.gemma3.modeling_gemma3.Gemma3RMSNorm.forward = self.saved


def self_test() -> None:
    for name in MODELS:
        ref = json.load(open(path(name, "reference.json")))
        t = st.load(path(name, "reference.safetensors"))
        model = load(name)
        with torch.no_grad():
            prefill, _ = logits(model, ref["prefill"]["ids"])
        assert (prefill - t["prefill.logits"]).abs().max() < 1e-5, f"{name}: stored logits differ"
        assert (t["decode.logits"] - t["prefill.logits"][4:11]).abs().max() < 1e-5, name

    # Gradients of the PPO variants against central finite differences on one LoRA A and one LoRA B entry, with
    # the norms in f64 (F64Norm); the stored gradients (HF's f32 norms) must agree with those to 1e-5.
    for (name, (base, _)), vname in [(g, v) for g in GRPO.items() for v in ("art", "token", "dr_grpo", "gspo")]:
        inp = json.load(open(path(name, "inputs.json")))
        groups = [g["trajectories"] for g in inp["groups"]]
        advs = [g["advantages"] for g in inp["groups"]]
        lora = st.load(path(name, "adapter_model.safetensors"))
        stored = st.load(path(name, f"grads-{vname}.safetensors"))
        var = grpo.VARIANTS[vname]
        with F64Norm():
            model, params = peft_model(base, lora)
            loss, _, _ = grpo.variant_loss(var, groups, advs, new_logprobs(Policy(model, True), groups))
            names = sorted(params)
            grads = dict(zip(names, torch.autograd.grad(loss, [params[k] for k in names])))
            worst = max(((grads[k] - stored[k]).abs().max() / stored[k].abs().max()).item() for k in names)
            assert worst < 1e-5, f"{name} {vname}: f64-norm gradients differ from the stored ones by {worst:.1e}"
            for key in ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
                        "base_model.model.model.layers.2.mlp.down_proj.lora_B.weight"):
                idx = int(grads[key].abs().argmax())
                h, fs = 1e-5, []
                for sgn in (1, -1):
                    with torch.no_grad():
                        params[key].view(-1)[idx] += sgn * h
                        fl, _, _ = grpo.variant_loss(var, groups, advs, new_logprobs(Policy(model, True), groups))
                        params[key].view(-1)[idx] -= sgn * h
                    fs.append(fl.item())
                fd = (fs[0] - fs[1]) / (2 * h)
                g = grads[key].view(-1)[idx].item()
                where = f"{name} {vname} {key.split('model.layers.')[1]}[{idx}]"
                assert abs(fd - g) <= 1e-6 * abs(g) + 1e-9, f"{where}: autograd {g} vs finite diff {fd}"
                print(f"  finite diff {where}: autograd {g:+.8e} fd {fd:+.8e} (stored vs f64 norms {worst:.1e})")
    print("self-test passed: stored logits, decode == prefill rows, PPO gradients vs finite differences")


def main() -> None:
    torch.set_num_threads(1)  # deterministic reductions
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    for name in MODELS:
        model_fixture(name)
    for name in GRPO:
        grpo_fixture(name)
    total = 0
    for p in written:
        total += os.path.getsize(p)
        print(f"wrote {p} ({os.path.getsize(p) / 1024:.1f} KiB)")
    print(f"total {total / 1024:.1f} KiB")
    self_test()


if __name__ == "__main__":
    main()
