#!/usr/bin/env python3
"""Data-parallel training under torchrun, in the shape of PyTorch's DDP
tutorial series (multigpu_torchrun.py): a toy model, a DistributedSampler,
a snapshot saved every few epochs and resumed when the job starts again.
Only the backend string and the device differ from a gloo job.

    torchrun --nproc_per_node 3 ddp_torchrun.py 4 1 --backend switchml
    torchrun --nproc_per_node 3 ddp_torchrun.py 8 1 --backend switchml   # resumes at epoch 4

The snapshot (--snapshot-path, default snapshot.pt) holds the model, the
optimizer and the number of epochs run; a job that finds it goes on from
there, as torchrun's restarts of a failed job do. --losses PREFIX writes each
rank's loss per epoch to PREFIX.rank<r>.json.
"""
import argparse
import inspect
import json
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class ToyDataset(Dataset):
    """size pairs of 20 inputs and one target, the same on every rank."""

    def __init__(self, size, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.rand(size, 20, generator=g)
        # A linear target and noise no model can learn: the loss settles
        # near 0.25, as a real one settles above zero.
        w = torch.linspace(-1, 1, 20, dtype=torch.float32).unsqueeze(1)
        self.y = self.x @ w + 0.5 * torch.randn(size, 1, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def ddp_setup(backend, device):
    if backend == "switchml":
        import switchml  # noqa: F401  (registers the backend)
    kwargs = {}
    # torch 2.x binds the default group to a device; 1.13 has no device_id.
    if "device_id" in inspect.signature(dist.init_process_group).parameters:
        kwargs["device_id"] = device
    dist.init_process_group(backend, **kwargs)


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every, snapshot_path, device):
        self.rank = dist.get_rank()
        self.device = device
        self.model = model.to(device)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.epochs_run = 0
        self.losses = {}
        if os.path.exists(snapshot_path):
            self._load_snapshot(snapshot_path)
        self.model = DDP(self.model)

    def _load_snapshot(self, path):
        # Onto the host; load_state_dict copies to the model's device.
        snapshot = torch.load(path, map_location="cpu")
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.optimizer.load_state_dict(snapshot["OPTIMIZER_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]
        print(f"[rank {self.rank}] resuming training from the snapshot at epoch {self.epochs_run}", flush=True)

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        total, steps = 0.0, 0
        for source, targets in self.train_data:
            total += self._run_batch(source.to(self.device), targets.to(self.device))
            steps += 1
        self.losses[epoch] = total / steps
        print(f"[rank {self.rank}] epoch {epoch} | batch size {self.train_data.batch_size} | steps {steps} | "
              f"loss {total / steps:.9g}", flush=True)

    def _save_snapshot(self, epoch):
        snapshot = {
            "MODEL_STATE": self.model.module.state_dict(),
            "OPTIMIZER_STATE": self.optimizer.state_dict(),
            "EPOCHS_RUN": epoch + 1,
        }
        tmp = self.snapshot_path + ".tmp"
        torch.save(snapshot, tmp)
        os.replace(tmp, self.snapshot_path)
        print(f"epoch {epoch} | training snapshot saved at {self.snapshot_path}", flush=True)

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.rank == 0 and ((epoch + 1) % self.save_every == 0 or epoch + 1 == max_epochs):
                self._save_snapshot(epoch)


def load_train_objs(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return ToyDataset(2048, seed), model, optimizer


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("total_epochs", type=int, help="epochs to train the model to")
    p.add_argument("save_every", type=int, help="save a snapshot every this many epochs")
    p.add_argument("--batch_size", type=int, default=32, help="per rank")
    p.add_argument("--backend", choices=["gloo", "switchml"], default="switchml")
    p.add_argument("--device", default="cpu:0", help="the device of the model and of the process group")
    p.add_argument("--snapshot-path", default="snapshot.pt")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--losses", help="write each rank's loss per epoch to LOSSES.rank<r>.json")
    a = p.parse_args()
    device = torch.device(a.device)
    torch.set_num_threads(1)
    ddp_setup(a.backend, device)
    dataset, model, optimizer = load_train_objs(a.seed)
    train_data = DataLoader(dataset, batch_size=a.batch_size, shuffle=False, sampler=DistributedSampler(dataset))
    trainer = Trainer(model, train_data, optimizer, a.save_every, a.snapshot_path, device)
    trainer.train(a.total_epochs)
    if a.losses:
        with open("%s.rank%d.json" % (a.losses, dist.get_rank()), "w") as f:
            json.dump({"backend": a.backend, "resumed_at": trainer.epochs_run, "losses": trainer.losses}, f)
    # Every rank leaves together: a rank that tears its group down while
    # rank 0 still saves the last snapshot can abort gloo's teardown.
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
