"""Small LoRA adapters for the demo model, made locally with PEFT: random and non-zero, so each changes the text.

PEFT starts lora_B at zero (an adapter that changes nothing until trained); here both matrices are random, seeded
per adapter, so the same call always writes the same adapters and each one's greedy text differs from the base's
and from the others'. They differ in rank and target modules too, so a mixed batch holds layers that some of its
adapters leave alone.
"""

from __future__ import annotations

from pathlib import Path

from tritongen.demo.model import write_folder

# (target modules, rank) of adapter k, cycling: attention only, every linear layer, MLP only.
SHAPES = ((("q_proj", "v_proj"), 4), (("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"), 8),
          (("gate_proj", "up_proj", "down_proj"), 4))
ADAPTERS_FOLDER = "adapters"


def adapter_dir(checkpoint: str | Path, k: int) -> Path:
    """Where demo adapter k (1-based) of a demo checkpoint is written: <checkpoint>/adapters/lora-<k>."""
    return Path(checkpoint) / ADAPTERS_FOLDER / f"lora-{k}"


def make_demo_adapters(checkpoint: str | Path, count: int, *, seed: int = 0, force: bool = False) -> list[Path]:
    """Write `count` PEFT LoRA adapters for the checkpoint in `checkpoint` (atomically each) and return their
    folders; an adapter folder that exists is kept unless `force`."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    paths = [adapter_dir(checkpoint, k) for k in range(1, count + 1)]
    todo = [(k, p) for k, p in enumerate(paths, 1) if force or not (p / "adapter_config.json").is_file()]
    for k, out in todo:
        targets, rank = SHAPES[(k - 1) % len(SHAPES)]
        base = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32)
        model = get_peft_model(base, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=list(targets),
                                                lora_dropout=0.0, task_type="CAUSAL_LM"))
        generator = torch.Generator().manual_seed(seed * 1000 + k)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_" in name:
                    # Large enough to move the demo model's sharp output head (x20) to other tokens.
                    param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
        write_folder(out, model.save_pretrained)
    return paths
