"""PEFT adapters both ways, for packages/engine/src/model/peft-interop.test.ts (which runs this script and skips
when python3 has no torch, transformers and peft):

1. an adapter webart wrote is loaded with transformers + PEFT onto its base model, every LoRA tensor is checked to
   be the file's (none left at its initial value), and the logits for the given ids are written for the test to
   compare with webart's;
2. PEFT makes an adapter itself (get_peft_model with rank_pattern / alpha_pattern / use_rslora, seeded random
   weights), saves it with save_pretrained, and writes its logits, for the test to load in webart.

usage: python3 scripts/peft_interop.py JOB.json   (the job's format is the test's; logits are raw little-endian f32)
       python3 scripts/peft_interop.py --fixture    (from the repo root: writes packages/engine/fixtures/peft-llama/,
                                                     direction 2 as a committed fixture, so tests without torch run it)
"""

import json
import os
import sys

import numpy as np
import peft
import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import LoraLayer
from peft.utils import get_peft_model_state_dict
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM


def base_model(path: str):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().contiguous()


def rank_scale(model) -> list[str]:
    """The distinct (rank, scale) pairs of the model's LoRA layers, for the test's log."""
    return sorted({f"{m.r['default']}:{m.scaling['default']:.4g}" for m in model.modules() if isinstance(m, LoraLayer)})


def write_f32(path: str, t: torch.Tensor) -> None:
    with open(path, "wb") as f:
        f.write(t.numpy().astype("<f4").tobytes())


def load_webart(case: dict) -> dict:
    model = PeftModel.from_pretrained(base_model(case["base"]), case["webart_adapter"])
    file = load_file(f"{case['webart_adapter']}/adapter_model.safetensors")
    state = get_peft_model_state_dict(model)
    if set(state) != set(file):
        raise SystemExit(
            f"{case['name']}: PEFT's adapter tensors differ from the file's: "
            f"only in PEFT {sorted(set(state) - set(file))[:4]}, only in the file {sorted(set(file) - set(state))[:4]}"
        )
    for k, v in file.items():
        if not torch.equal(state[k].float(), v.float()):
            raise SystemExit(f"{case['name']}: PEFT did not load {k} as written")
    write_f32(case["webart_adapter_logits"], logits(model, case["ids"]))
    return {"tensors": len(file), "rank_scale": rank_scale(model)}


def save_peft(case: dict) -> dict:
    torch.manual_seed(case["seed"])
    model = get_peft_model(base_model(case["base"]), LoraConfig(task_type="CAUSAL_LM", **case["peft_config"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn_like(p) * 0.2)
    model.save_pretrained(case["peft_adapter"])
    write_f32(case["peft_adapter_logits"], logits(model.eval(), case["ids"]))
    return {"tensors": len(get_peft_model_state_dict(model)), "rank_scale": rank_scale(model)}


FIXTURE = {
    "name": "peft-llama",
    "base": "packages/engine/fixtures/llama-tiny",
    "ids": [99, 301, 222, 115, 43, 251, 127, 189],
    "seed": 23,
    "peft_config": {
        "r": 4,
        "lora_alpha": 8,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        "rank_pattern": {"model.layers.0.mlp.up_proj": 2, "k_proj": 6},
        "alpha_pattern": {"o_proj": 2.5, "layers\\.1\\.self_attn\\.q_proj": 12},
        "use_rslora": True,
    },
}


def fixture() -> None:
    if os.environ.get("PYTHONHASHSEED") != "0":
        # PEFT keeps target_modules as a set: a fixed hash seed writes them in the same order every run.
        os.execvpe(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    out = "packages/engine/fixtures/peft-llama"
    case = {**FIXTURE, "peft_adapter": out, "peft_adapter_logits": f"{out}/logits.f32"}
    save_peft(case)
    t = torch.from_numpy(np.fromfile(case["peft_adapter_logits"], dtype="<f4"))
    os.remove(case["peft_adapter_logits"])
    os.remove(f"{out}/README.md")  # save_pretrained's model card template
    save_file({"logits": t.reshape(len(case["ids"]), -1)}, f"{out}/reference.safetensors")
    ref = {k: FIXTURE[k] for k in ("base", "ids", "seed", "peft_config")}
    ref["made_by"] = f"scripts/peft_interop.py --fixture (peft {peft.__version__}, transformers {transformers.__version__})"
    json.dump(ref, open(f"{out}/reference.json", "w"), indent=2)
    for f in os.listdir(out):
        os.chmod(f"{out}/{f}", 0o644)
    print(f"wrote {out}/")


def main() -> None:
    if sys.argv[1] == "--fixture":
        return fixture()
    job = json.load(open(sys.argv[1]))
    out = {c["name"]: {"webart_to_peft": load_webart(c), "peft_to_webart": save_peft(c)} for c in job["cases"]}
    json.dump(out, open(job["out"], "w"), indent=2)


if __name__ == "__main__":
    main()
