"""The lab's real training job: a tiny drafter trained with torchrun, DDP and gloo on CPU.

This is not a simulation. ``torchrun --nproc_per_node=2 -m specconsole.lab.doubles.trainer
--log-path PATH`` (or ``python -m torch.distributed.run ...``) starts the real launcher (the
elastic agent) and two real worker processes; the workers join a gloo process group, wrap a
small model in DistributedDataParallel and run real forward passes, backward passes (gradients
are all-reduced between the workers) and optimizer steps, so the loss actually falls. What is
scaled down is only the model and the data:

* the "drafter" is an embedding, a small MLP and an output head over a 256-token vocabulary,
  trained on random tokens to predict a fixed token mapping (it learns it within a few hundred
  steps; the loss starts near ln(256) = 5.5);
* ``--step-seconds`` paces each step with a sleep, so a demo runs for days (the default, 18.6 s
  per step for 33000 steps, is the seed workflow's 7.1 days to 6 epochs) and a test in seconds.

Rank 0 appends one JSON line per step to ``--log-path``, flushed at once, in the shape of a real
drafter trainer::

    {"time": 1751920852.123, "step": 50, "epoch": 0.009091, "loss": 5.1234, "lr": 0.001,
     "tokens_per_sec": 19500.2, "grad_norm": 1.23, "total_steps": 33000}

plus plain lines as SpecForge prints them (``Total training steps: N``, ``Starting training
from epoch 0, step 0``, and on a stop ``Received SIGTERM ...``). Like a real trainer it handles
SIGTERM/SIGINT: the torchrun launcher forwards the signal to every worker's process group; the
workers agree (an all-reduce of a stop flag) to stop after the current step, rank 0 logs the
stop and all exit 0. Each worker sees ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` from torchrun.

While ``--freeze-file`` exists the workers keep running (and keep agreeing, every 50 ms, that it
does) but take no step and log nothing: a stalled job, as ``specconsole lab freeze-training`` makes
one for the stall alert; removing the file (``thaw-training``) resumes training where it stopped.

Spell the option ``--log-path``: under torchrun a bare ``--log`` never reaches the trainer,
because torchrun's own parser rejects it as an ambiguous prefix of ``--log-dir``/``--logs-specs``.
``--log`` works only without torchrun (``python -m specconsole.lab.doubles.trainer --log PATH``), which
trains as a single process (world size 1). torch is imported only inside :func:`main`; one
thread per process (``torch.set_num_threads(1)``) keeps two workers from fighting over a small
machine's cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import socket
import sys
import time
import warnings
from pathlib import Path
from typing import Any, TextIO

VOCAB = 256
DIM = 64
SEQ = 16  # a DFlash-style block of 16 draft positions per sample
DEFAULT_STEPS_PER_EPOCH = 5500
DEFAULT_EPOCHS = 6
DEFAULT_STEP_SECONDS = 18.6


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m specconsole.lab.doubles.trainer",
        description="The lab's tiny real DDP training job (run it under torchrun).",
    )
    # Under torchrun, "--log" alone is refused by torchrun's own parser (an ambiguous prefix of
    # its --log-dir/--logs-specs), so "--log-path" is the spelling that works everywhere.
    p.add_argument("--log-path", "--log", dest="log", required=True,
                   help="JSON-lines log to append to (rank 0 writes it)")
    p.add_argument("--steps", type=int, default=None,
                   help="total optimizer steps (default: epochs x steps-per-epoch = 33000)")
    p.add_argument("--epochs", type=float, default=DEFAULT_EPOCHS, help="epochs (default 6)")
    p.add_argument("--steps-per-epoch", type=int, default=None,
                   help=f"steps per epoch (default: steps / epochs, or {DEFAULT_STEPS_PER_EPOCH})")
    p.add_argument("--step-seconds", type=float, default=DEFAULT_STEP_SECONDS,
                   help=f"wall time per step, paced with a sleep (default {DEFAULT_STEP_SECONDS})")
    p.add_argument("--batch-tokens", type=int, default=2048, help="tokens per worker per step")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--freeze-file", default=None,
                   help="while this file exists the job makes no progress but keeps running (the lab's "
                        "`specconsole lab freeze-training`: a stalled job, for the stall alert)")
    args = p.parse_args(argv)
    if args.epochs <= 0:
        p.error("--epochs must be positive")
    if args.steps is not None and args.steps <= 0:
        p.error("--steps must be positive")
    if args.steps_per_epoch is None:
        args.steps_per_epoch = (math.ceil(args.steps / args.epochs) if args.steps
                                else DEFAULT_STEPS_PER_EPOCH)
    if args.steps_per_epoch <= 0:
        p.error("--steps-per-epoch must be positive")
    if args.steps is None:
        args.steps = math.ceil(args.epochs * args.steps_per_epoch)
    if args.batch_tokens < SEQ:
        p.error(f"--batch-tokens must be at least {SEQ}")
    if args.step_seconds < 0:
        p.error("--step-seconds must not be negative")
    return args


class _Stop:
    """Set by SIGTERM/SIGINT; checked between steps and while pacing."""

    def __init__(self) -> None:
        self.signal: str | None = None

    def __call__(self, signum: int, _frame: Any) -> None:
        self.signal = signal.Signals(signum).name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _log(out: TextIO | None, line: str) -> None:
    if out is not None:
        out.write(line + "\n")
        out.flush()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    warnings.filterwarnings("ignore", message=".*NumPy.*")
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    else:  # a plain `python -m`: a world of one
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}",
                                rank=0, world_size=1)
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(args.seed)  # same initial weights on every rank (DDP also broadcasts)
    model = nn.Sequential(
        nn.Embedding(VOCAB, DIM), nn.Linear(DIM, DIM), nn.GELU(), nn.Linear(DIM, VOCAB),
    )
    ddp = DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr, weight_decay=0.01)
    warmup = min(100, int(args.steps) // 10)

    base_lr, steps = float(args.lr), int(args.steps)

    def lr_at(step: int) -> float:  # linear warmup, then cosine decay to 10%
        if step < warmup:
            return base_lr * (step + 1) / warmup
        frac = (step - warmup) / max(1, steps - warmup)
        return base_lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, frac))))

    mapping = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(1234))
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    rows = args.batch_tokens // SEQ
    loss_fn = nn.CrossEntropyLoss()

    out: TextIO | None = None
    if rank == 0:
        Path(args.log).expanduser().parent.mkdir(parents=True, exist_ok=True)
        out = open(Path(args.log).expanduser(), "a", encoding="utf-8")  # noqa: SIM115
        _log(out, f"Total training steps: {args.steps}")
        _log(out, f"Starting training from epoch 0, step 0 (world size {world}, "
                  f"{args.steps_per_epoch} steps per epoch)")

    step = 0
    flag = torch.zeros(1)
    status = 0
    freeze = Path(args.freeze_file).expanduser() if args.freeze_file else None
    try:
        while step < args.steps:
            # 2: stop; 1: frozen (no step, no log line, processes alive: a hung job); 0: train
            flag[0] = 2.0 if stop.signal else 1.0 if freeze is not None and freeze.exists() else 0.0
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank stops (or waits) at the same step
            if flag.item() >= 2:
                _log(out, f"Received {stop.signal or 'SIGTERM'} at step {step}, stopping training")
                break
            if flag.item() >= 1:
                time.sleep(0.05)
                continue
            t0 = time.monotonic()
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
            tokens = torch.randint(0, VOCAB, (rows, SEQ), generator=gen)
            logits = ddp(tokens)
            loss = loss_fn(logits.reshape(-1, VOCAB), mapping[tokens].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()  # DDP all-reduces the gradients here
            grad_norm = float(torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0))
            opt.step()
            step += 1
            mean_loss = loss.detach().clone()
            dist.all_reduce(mean_loss)
            mean_loss /= world
            # pace the step (interruptibly, so a signal is acted on at once)
            deadline = t0 + args.step_seconds
            while not stop.signal and (left := deadline - time.monotonic()) > 0:
                time.sleep(min(0.05, left))
            elapsed = max(time.monotonic() - t0, 1e-9)
            _log(out, json.dumps({
                "time": round(time.time(), 3),
                "step": step,
                "epoch": round(step / args.steps_per_epoch, 6),
                "loss": round(float(mean_loss), 4),
                "lr": float(f"{lr_at(step - 1):.6g}"),
                "tokens_per_sec": round(args.batch_tokens * world / elapsed, 1),
                "grad_norm": round(grad_norm, 4),
                "total_steps": args.steps,
            }))
        else:
            _log(out, f"Training complete: {step} steps")
    except Exception as err:  # a peer died (gloo) or similar: say so, exit non-zero
        print(f"rank {rank}: training failed at step {step}: {err}", file=sys.stderr, flush=True)
        _log(out, f"Training failed at step {step}: {err}")
        status = 1
    finally:
        if out is not None:
            out.close()
        if status == 0:
            dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
