#!/usr/bin/env python3
"""FSDP2 (fully_shard) training of a small Transformer under torchrun, in the
shape of PyTorch's FSDP2 example: per-block sharding, optional explicit
prefetching, optional bf16 mixed precision (gradients reduced in float32, or
in bfloat16 with --reduce-dtype bfloat16), and a checkpoint that a second
job resumes from. Only the backend string and the device differ from a gloo
job. torch 2.x.

    torchrun --nproc_per_node 2 fsdp2_torchrun.py --backend switchml --steps 4 --checkpoint-dir ckpt
    torchrun --nproc_per_node 2 fsdp2_torchrun.py --backend switchml --steps 8 --checkpoint-dir ckpt  # resumes at step 4

--checkpoint dcp saves and loads with torch.distributed.checkpoint (each rank
its shards, dcp.save / dcp.load of the model's and optimizer's sharded state
dicts). --checkpoint dtensor gathers full tensors to rank 0 (full_tensor()),
which saves them with torch.save, and a resuming job builds the model on the
meta device and shards the full tensors again with distribute_tensor.

--losses PREFIX writes each rank's loss per step, and a checksum of its
shards as saved and as loaded, to PREFIX.rank<r>.json.
"""
import argparse
import json
import math
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm2 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Transformer(nn.Module):
    def __init__(self, vocab, seq_len, dim, heads, layers):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq_len, dim)
        self.layers = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for layer in self.layers:
            x = layer(x)
        return self.out(self.norm(x))


def build(a, mesh, device):
    """The model on device (the meta device: parameters without storage),
    sharded on mesh: fully_shard per block and on the whole."""
    with torch.device(device):
        model = Transformer(a.vocab, a.seq_len, a.dim, a.heads, a.layers)
    kw = {"mesh": mesh}
    if a.mixed_precision:
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=getattr(torch, a.reduce_dtype))
    for layer in model.layers:
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    if a.explicit_prefetching:
        layers = list(model.layers)
        for i, layer in enumerate(layers):
            layer.set_modules_to_forward_prefetch(layers[i + 1:i + 3])
            layer.set_modules_to_backward_prefetch(layers[max(0, i - 2):i][::-1])
    return model


def checksum(model):
    """The sum of this rank's shards, in float64: the same when a job saves
    them and when the next loads them, whatever the backend."""
    return math.fsum(float((p.to_local() if isinstance(p, DTensor) else p).double().sum())
                     for p in model.state_dict().values())


class Checkpointer:
    def __init__(self, folder, kind):
        self.folder = os.path.join(folder, kind)
        self.kind = kind

    def last_step(self):
        try:
            with open(os.path.join(self.folder, "step")) as f:
                return int(f.read())
        except FileNotFoundError:
            return None

    def save(self, model, optim, step):
        """Every rank calls it; the step file, written last, marks the
        checkpoint complete."""
        if self.kind == "dcp":
            dcp.save({"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, optim)},
                     checkpoint_id=os.path.join(self.folder, "dcp"))
        else:
            full_model = {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in model.state_dict().items()}
            sd = optim.state_dict()
            full_state = {pid: {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in st.items()}
                          for pid, st in sd["state"].items()}
            if dist.get_rank() == 0:
                torch.save({"model": full_model, "optim": {"state": full_state, "param_groups": sd["param_groups"]}},
                           os.path.join(self.folder, "full.pt"))
        dist.barrier()
        if dist.get_rank() == 0:
            with open(os.path.join(self.folder, "step.tmp"), "w") as f:
                f.write(str(step))
            os.replace(os.path.join(self.folder, "step.tmp"), os.path.join(self.folder, "step"))

    def load_model(self, model):
        if self.kind == "dcp":
            state = {"model": get_model_state_dict(model)}
            dcp.load(state, checkpoint_id=os.path.join(self.folder, "dcp"))
            set_model_state_dict(model, state["model"])
            return
        full = torch.load(os.path.join(self.folder, "full.pt"), map_location="cpu", weights_only=True)
        meta = model.state_dict()
        sharded = {k: nn.Parameter(distribute_tensor(v, meta[k].device_mesh, meta[k].placements))
                   for k, v in full["model"].items()}
        # assign: a parameter on the meta device has nothing to copy into.
        model.load_state_dict(sharded, assign=True)

    def load_optim(self, model, optim):
        if self.kind == "dcp":
            state = {"optim": get_optimizer_state_dict(model, optim)}
            dcp.load(state, checkpoint_id=os.path.join(self.folder, "dcp"))
            set_optimizer_state_dict(model, optim, state["optim"])
            return
        full = torch.load(os.path.join(self.folder, "full.pt"), map_location="cpu", weights_only=True)["optim"]
        # The optimizer's state, sharded as its parameters are (a step
        # count is a scalar every rank keeps whole).
        params = list(model.parameters())
        optim.load_state_dict({
            "param_groups": full["param_groups"],
            "state": {pid: {k: distribute_tensor(v, params[pid].device_mesh, params[pid].placements)
                            if v.dim() > 0 else v for k, v in st.items()}
                      for pid, st in full["state"].items()},
        })


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["gloo", "switchml"], default="switchml")
    p.add_argument("--device", default="cpu:0", help="the device of the model and of the process group")
    p.add_argument("--steps", type=int, default=6, help="train up to this step (from the checkpoint's, if any)")
    p.add_argument("--checkpoint-dir", help="save here after the last step, and resume from what is here")
    p.add_argument("--checkpoint", choices=["dcp", "dtensor"], default="dcp")
    p.add_argument("--mixed-precision", action="store_true",
                   help="bf16 parameters, gradients reduced in --reduce-dtype")
    p.add_argument("--reduce-dtype", choices=["float32", "bfloat16"], default="float32",
                   help="with --mixed-precision, the dtype of the gradient reduction: bfloat16 halves its bytes (the "
                   "switchml backend sends bfloat16 at 16 bits a value)")
    p.add_argument("--explicit-prefetching", action="store_true")
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=8, help="per rank")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--losses", help="write each rank's losses to LOSSES.rank<r>.json")
    a = p.parse_args()
    torch.set_num_threads(1)
    device = torch.device(a.device)
    if a.backend == "switchml":
        import switchml  # noqa: F401  (registers the backend)
    dist.init_process_group(a.backend, device_id=device)
    rank = dist.get_rank()

    ckpt = Checkpointer(a.checkpoint_dir, a.checkpoint) if a.checkpoint_dir else None
    start = ckpt.last_step() if ckpt else None
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    if start is None:
        torch.manual_seed(a.seed)  # the same full model on every rank, sharded where it is
        model = build(a, mesh, device)
    else:
        model = build(a, mesh, torch.device("meta"))
        if a.checkpoint == "dcp":  # dcp.load fills tensors in place
            model.to_empty(device=device)
    record = {"backend": a.backend, "resumed_at": start, "losses": {}}
    if start is not None:
        ckpt.load_model(model)
    optim = torch.optim.AdamW(model.parameters(), lr=3e-3)
    if start is not None:
        ckpt.load_optim(model, optim)
        record["loaded_checksum"] = checksum(model)
        print(f"[rank {rank}] resumed from the {a.checkpoint} checkpoint at step {start}", flush=True)
    for step in range(start or 0, a.steps):
        g = torch.Generator().manual_seed(a.seed * 100003 + step * 101 + rank)
        # Sequences the model can learn: a random first token, and every
        # other follows from the one before.
        tokens = torch.empty(a.batch_size, a.seq_len + 1, dtype=torch.long)
        tokens[:, 0] = torch.randint(0, a.vocab, (a.batch_size,), generator=g)
        for i in range(a.seq_len):
            tokens[:, i + 1] = (tokens[:, i] * 7 + 3) % a.vocab
        tokens = tokens.to(device)
        if a.explicit_prefetching:
            model.unshard()
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, a.vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        optim.step()
        optim.zero_grad()
        record["losses"][step] = loss.item()
        print(f"[rank {rank}] step {step} loss {loss.item():.9g}", flush=True)
    if ckpt:
        os.makedirs(ckpt.folder, exist_ok=True)  # every rank: dcp writes its own files
        ckpt.save(model, optim, a.steps)
        record["saved_checksum"] = checksum(model)
    if a.backend == "switchml":
        # What the switch carried: the width each dtype travelled at, and
        # the library's count of what this rank sent.
        pg = dist.group.WORLD
        record["wire_bits"] = {name: pg.wire_bits(getattr(torch, name)) for name in ("float32", "bfloat16")}
        record["sent"] = pg.stats()
    if a.losses:
        with open("%s.rank%d.json" % (a.losses, rank), "w") as f:
            json.dump(record, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
