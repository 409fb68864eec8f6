"""Checks a LoRA checkpoint this project wrote against PEFT on a real base model:
python scripts/check_peft_adapter.py COPY_DIR BASE.gguf

COPY_DIR is one copy of a LoRA run's checkpoint (e.g. runs/x/checkpoints/iter-000012/policy:
the merged model plus adapter/); BASE.gguf the base model the run started from (transformers
reads GGUF with the `gguf` package). Prints the largest logit difference between the merged
checkpoint and `PeftModel.from_pretrained(base, COPY_DIR/adapter)`, and, for scale, the
adapters' own effect (merged against the base with the adapters disabled). Pinned as the
fixtures: torch==2.15.0, transformers==4.57.1, peft==0.17.1, gguf==0.19.0.
"""
import sys

import torch
from pathlib import Path
from transformers import AutoModelForCausalLM
from peft import PeftModel
ckpt = Path(sys.argv[1]); gguf = Path(sys.argv[2])
merged = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
base = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
peft = PeftModel.from_pretrained(base, ckpt / "adapter").eval()
ids = torch.tensor([[1, 504, 3458, 282, 4649, 314, 253, 1345, 30, 41, 216, 57, 2]])
with torch.no_grad():
    a = merged(input_ids=ids).logits; b = peft(input_ids=ids).logits
    peft.disable_adapter_layers(); c = peft(input_ids=ids).logits
print(f"max |merged - peft(base, adapter)| {(a-b).abs().max().item():.2e}; adapter effect |merged - base| {(a-c).abs().max().item():.2e}")
