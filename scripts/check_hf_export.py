#!/usr/bin/env python3
"""Check that a checkpoint exported by this project means the same thing in transformers.

Usage: check_hf_export.py HF_DIR OURS.json IN.json
  HF_DIR    written by `lm-app convert` (or an imdb-app/gsm8k-app checkpoint directory)
  IN.json   {"input_ids": [[...]], "attention_mask": [[...]]}, right-padded
  OURS.json `lm-app logits --model <original or HF_DIR> --input IN.json --out OURS.json`
Loads HF_DIR with AutoModelForCausalLM and AutoTokenizer (needs torch + transformers), compares
logits at every unpadded position, and checks the tokenizer against the ids in IN.json when
IN.json also has "texts" (then its ids must come from this project's tokenizer). Exits 1 when the largest difference exceeds 1e-3.
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

hf_dir, ours_path, in_path = sys.argv[1:4]
inp = json.load(open(in_path))
ours = torch.tensor(json.load(open(ours_path))["logits"])
model = AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
ids = torch.tensor(inp["input_ids"])
mask = torch.tensor(inp["attention_mask"])
with torch.no_grad():
    ref = model(input_ids=ids, attention_mask=mask).logits
diff = ((ref - ours).abs() * mask[..., None]).max().item()
print(f"max |logit diff| over unpadded positions: {diff:.3e}")
tok_ok = True
if "texts" in inp:
    tok = AutoTokenizer.from_pretrained(hf_dir)
    for text, row, m in zip(inp["texts"], inp["input_ids"], inp["attention_mask"]):
        want = [t for t, k in zip(row, m) if k]
        got = tok(text, add_special_tokens=False)["input_ids"]
        if got != want:
            tok_ok = False
            print(f"tokenizer mismatch on {text!r}: {got} vs {want}")
    print("tokenizer:", "same ids" if tok_ok else "DIFFERENT ids")
sys.exit(0 if diff < 1e-3 and tok_ok else 1)
