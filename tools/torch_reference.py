#!/usr/bin/env python3
"""Run a twin scenario's model in PyTorch and record what `twin verify step --measured` reads.

From a twin scenario this builds the matching model with random weights: a Hugging Face
`LlamaForCausalLM` (transformers) for gated-MLP models, or a plain GPT-style transformer
written here for the rest. It runs warm-up steps and then measured steps of the scenario's global
batch (gradient accumulation over its micro batches), on one GPU or data parallel under
`torchrun` (DDP). It writes, per rank:

    OUT/<name>.rank<R>.trace.json.gz     torch.profiler (Kineto) trace of one step
    OUT/<name>.rank<R>.memsnap.pickle.gz torch.cuda.memory._snapshot() of that step
    OUT/<name>.meta.json                 settings, unprofiled step times, peaks (rank 0)

Usage (needs a GPU, PyTorch, and transformers for gated models; not run in CI):

    twin simulate SCENARIO --resolved /tmp/resolved.toml
    python3 tools/torch_reference.py /tmp/resolved.toml OUT [--steps 6] [--warmup 3] [--compile]
    torchrun --nproc-per-node 8 tools/torch_reference.py /tmp/resolved.toml OUT
    twin verify step SCENARIO --profile PROFILE --measured OUT/<name>.rank0.trace.json.gz \\
        --memory-snapshot OUT/<name>.rank0.memsnap.pickle.gz

`--dry-run` prints the model and batch it would build and exits without importing torch.

What it reproduces is twin's `framework = "hf"`: fp32 weights under `torch.autocast(bfloat16)`
(precision bf16 or fp16), or the scenario's fp32; SDPA attention; `AdamW(fused=True)`.
Tensor, pipeline, context and expert parallelism are refused: this script runs data
parallelism only.
"""

import argparse
import contextlib
import gzip
import json
import os
import pickle
import statistics
import sys
import time
import tomllib


def read_scenario(path):
    with open(path, "rb") as f:
        s = tomllib.load(f)
    m, p, t = s.get("model", {}), s.get("parallel", {}), s.get("training", {})
    for axis in ("tp", "pp", "cp", "ep"):
        if int(p.get(axis, 1)) != 1:
            sys.exit(f"{path}: parallel.{axis} = {p[axis]}: this script runs data parallelism only")
    if "preset" in m:
        sys.exit(f"{path}: model.preset is unresolved; write the scenario with "
                 "`twin simulate SCENARIO --resolved FILE` and pass FILE")
    if m.get("experts"):
        sys.exit(f"{path}: mixture-of-experts models are not built by this script")
    need = ["layers", "hidden", "heads", "seq_len", "vocab"]
    missing = [k for k in need if k not in m]
    if missing:
        sys.exit(f"{path}: [model] lacks {', '.join(missing)}")
    dp = int(p.get("dp", 1))
    micro = int(t.get("micro_batch", 1))
    glob = int(t["global_batch"])
    if glob % (micro * dp):
        sys.exit(f"{path}: global_batch {glob} is not a multiple of micro_batch*dp = {micro * dp}")
    return {
        "name": s.get("name", os.path.splitext(os.path.basename(path))[0]),
        "layers": int(m["layers"]),
        "hidden": int(m["hidden"]),
        "heads": int(m["heads"]),
        "kv_heads": int(m.get("kv_heads", m["heads"])),
        "head_dim": int(m.get("head_dim", int(m["hidden"]) // int(m["heads"]))),
        "ffn": int(m.get("ffn_hidden", 4 * int(m["hidden"]))),
        "seq": int(m["seq_len"]),
        "vocab": int(m["vocab"]),
        "gated": bool(m.get("gated_mlp", False)),
        "tied": bool(m.get("tied_embeddings", False)),
        "dp": dp,
        "micro": micro,
        "accum": glob // (micro * dp),
        "precision": t.get("precision", "bf16"),
        "compile": bool(t.get("compile", False)),
    }


def build_model(cfg, torch):
    if cfg["gated"]:
        from transformers import LlamaConfig, LlamaForCausalLM

        hf = LlamaConfig(
            vocab_size=cfg["vocab"], hidden_size=cfg["hidden"], intermediate_size=cfg["ffn"],
            num_hidden_layers=cfg["layers"], num_attention_heads=cfg["heads"],
            num_key_value_heads=cfg["kv_heads"], head_dim=cfg["head_dim"],
            max_position_embeddings=cfg["seq"], tie_word_embeddings=cfg["tied"],
            attn_implementation="sdpa",
        )
        with torch.device("cuda"):
            return LlamaForCausalLM(hf), True
    return Gpt(cfg, torch).cuda(), False


def Gpt(cfg, torch):
    """A plain pre-norm GPT: LayerNorm, MHA through SDPA, GeLU MLP."""
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            h, d = cfg["hidden"], cfg["head_dim"]
            self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.qkv = nn.Linear(h, (cfg["heads"] + 2 * cfg["kv_heads"]) * d)
            self.proj = nn.Linear(cfg["heads"] * d, h)
            self.fc1, self.fc2 = nn.Linear(h, cfg["ffn"]), nn.Linear(cfg["ffn"], h)

        def forward(self, x):
            b, s, _ = x.shape
            d, hq, hk = cfg["head_dim"], cfg["heads"], cfg["kv_heads"]
            q, k, v = self.qkv(self.ln1(x)).split([hq * d, hk * d, hk * d], dim=-1)
            q = q.view(b, s, hq, d).transpose(1, 2)
            k = k.view(b, s, hk, d).transpose(1, 2)
            v = v.view(b, s, hk, d).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=hq != hk)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, hq * d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(cfg["vocab"], cfg["hidden"])
            self.blocks = nn.ModuleList(Block() for _ in range(cfg["layers"]))
            self.ln = nn.LayerNorm(cfg["hidden"])
            self.head = nn.Linear(cfg["hidden"], cfg["vocab"], bias=False)
            if cfg["tied"]:
                self.head.weight = self.emb.weight

        def forward(self, ids):
            x = self.emb(ids)
            for blk in self.blocks:
                x = blk(x)
            logits = self.head(self.ln(x)).float()
            return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)),
                                   ids[:, 1:].reshape(-1))

    return Model()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", help="a resolved twin scenario (twin simulate S --resolved FILE)")
    ap.add_argument("out", help="output directory")
    ap.add_argument("--steps", type=int, default=6, help="unprofiled steps timed (median)")
    ap.add_argument("--warmup", type=int, default=3, help="steps run first, not timed")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--dry-run", action="store_true", help="print the job and exit")
    a = ap.parse_args()
    cfg = read_scenario(a.scenario)
    cfg["compile"] = cfg["compile"] or a.compile
    if a.dry_run:
        print(json.dumps(cfg, indent=1))
        return

    import torch
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != cfg["dp"]:
        sys.exit(f"the scenario has dp = {cfg['dp']} but {world} processes run; "
                 f"use torchrun --nproc-per-node {cfg['dp']}")
    rank = int(os.environ.get("RANK", "0"))
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if world > 1:
        dist.init_process_group("nccl")
    torch.manual_seed(1 + rank)
    model, is_hf = build_model(cfg, torch)
    if cfg["precision"] == "fp32":
        amp = None
    else:
        amp = torch.bfloat16 if cfg["precision"] in ("bf16", "fp8") else torch.float16
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    if cfg["compile"]:
        model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, cfg["vocab"], (cfg["accum"], cfg["micro"], cfg["seq"]), device="cuda")

    def step():
        for i in range(cfg["accum"]):
            sync = world == 1 or i == cfg["accum"] - 1
            ctx = contextlib.nullcontext() if sync else model.no_sync()
            with ctx, torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None):
                x = ids[i]
                loss = model(input_ids=x, labels=x).loss if is_hf else model(x)
                (loss / cfg["accum"]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    peak_alloc, peak_res = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()

    os.makedirs(a.out, exist_ok=True)
    base = os.path.join(a.out, f"{cfg['name']}.rank{rank}")
    torch.cuda.memory._record_memory_history(max_entries=200000)
    from torch.profiler import ProfilerActivity, profile, schedule

    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=acts, schedule=schedule(wait=0, warmup=1, active=1),
                 record_shapes=True, profile_memory=True) as prof:
        for _ in range(2):
            step()
            prof.step()
    torch.cuda.synchronize()
    with gzip.open(base + ".memsnap.pickle.gz", "wb") as f:
        pickle.dump(torch.cuda.memory._snapshot(), f)
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = base + ".trace.json"
    prof.export_chrome_trace(trace)
    with open(trace, "rb") as src, gzip.open(trace + ".gz", "wb") as dst:
        dst.write(src.read())
    os.remove(trace)
    if rank == 0:
        meta = dict(cfg, torch=torch.__version__, gpu=torch.cuda.get_device_name(),
                    step_s_median=statistics.median(times), step_s=times,
                    max_alloc_bytes=peak_alloc, max_reserved_bytes=peak_res)
        with open(os.path.join(a.out, f"{cfg['name']}.meta.json"), "w") as f:
            json.dump(meta, f, indent=1)
        print(json.dumps({k: meta[k] for k in ("step_s_median", "max_alloc_bytes",
                                                "max_reserved_bytes")}))
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
