#!/usr/bin/env python3
"""The same two measurements as `lm-app bench --config SHAPE.json`, in PyTorch + transformers,
on a randomly initialised model of that shape (speed does not depend on the weights' values).

Usage: bench_peer_shapes.py SHAPE.json [--reps 3] [--threads 2]
Pinned: torch==2.15.0, transformers==4.57.1 (CPU, float32).

- generation: HF `generate`, batch 8 x 16 prompt tokens, 32 new tokens, pure sampling
  (top_k 0, top_p 1), KV cache, no early stop;
- forward+backward of the LM loss (`labels=input_ids`), batch 8 x 64.
Prints one JSON line prefixed `PEER_JSON ` with medians, tokens/s and the process's peak RSS.
"""
import argparse
import json
import resource
import statistics
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

BATCH, Q_LEN, R_LEN, FB_SEQ = 8, 16, 32, 64


def timeit(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), ts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shape")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = AutoConfig.from_pretrained(args.shape)
    lm = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    vocab = cfg.vocab_size
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(0, vocab - 1, (BATCH, Q_LEN), generator=g)
    attn = torch.ones_like(prompts)
    lm.generation_config.eos_token_id = None

    def gen():
        with torch.no_grad():
            out = lm.generate(prompts, attention_mask=attn, max_new_tokens=R_LEN,
                              min_new_tokens=R_LEN, do_sample=True, top_k=0, top_p=1.0,
                              pad_token_id=0, use_cache=True)
        assert out.shape == (BATCH, Q_LEN + R_LEN)

    lm.eval()
    gen_med, gen_all = timeit(gen, args.reps)
    ids = torch.randint(0, vocab, (BATCH, FB_SEQ), generator=g)
    lm.train()
    for m in lm.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0

    def fwdbwd():
        lm.zero_grad(set_to_none=True)
        lm(input_ids=ids, labels=ids).loss.backward()

    fb_med, fb_all = timeit(fwdbwd, args.reps)
    rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    out = {
        "shape": args.shape,
        "params": sum(p.numel() for p in lm.parameters()),
        "gen_secs_median": gen_med,
        "gen_tok_per_s": BATCH * R_LEN / gen_med,
        "gen_secs": gen_all,
        "fwdbwd_secs_median": fb_med,
        "fwdbwd_secs": fb_all,
        "peak_rss_gib": rss_gib,
        "torch": torch.__version__,
    }
    print("PEER_JSON " + json.dumps(out))


if __name__ == "__main__":
    main()
