"""A synthetic fleet: a console config with many hosts, all served by the lab's two sshds.

Each ``[[hosts]]`` entry is its own SSH connection to the lab's train or serve sshd (alternating),
with a ``tail -F`` of a training log and, on every ``gpu_every``-th host (none if 0), the
``nvidia-smi -lms`` stream of the lab's GPU test double. An optional ``connect = "local"`` host
runs the same two streams as child processes of the console (the lab's ``bin/`` must then be
on its PATH).
Used by the exit tests and ``bench/console_exit.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

from specconsole.lab.files import toml_str
from specconsole.lab.parts.console_config import console_and_ssh
from specconsole.lab.parts.environment import Lab
from specconsole.lab.parts.state import LabHost


def write_training_log(path: Path, steps: int = 20) -> Path:
    """A small drafter-style JSON-lines log that every host of the fleet tails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"step": s, "epoch": 0, "loss": 2.0 - s / 100, "lr": 1e-4}) + "\n"
                            for s in range(1, steps + 1)))
    return path


def write_fleet_config(lab: Lab, path: Path, hosts: int, *, log_path: Path, audit_log: Path,
                       state_dir: Path, gpu_every: int = 1, local: bool = False,
                       gpu_interval_s: float = 1.0, gpu_frames: bool = True) -> Path:
    """Write a config of ``hosts`` SSH hosts (plus one local host if ``local``) to ``path``
    (``gpu_frames``: each host's ``gpu.frames``)."""
    key = lab.keys / "client_ed25519"
    lab_hosts = [lab.state.hosts[n] for n in ("train", "serve")]
    parts = [console_and_ssh(lab, audit_log, state_dir, connect_timeout_s=10)]
    entries: list[tuple[str, LabHost | None]] = [(f"h{i:03d}", lab_hosts[i % 2]) for i in range(hosts)]
    if local:
        entries.append(("local", None))
    for i, (name, h) in enumerate(entries):
        if h is None:
            how = 'connect = "local"'
        else:
            how = (f'connect = "ssh"\nhost = {toml_str(h.address)}\nport = {h.port}\nuser = "root"\n'
                   f"identity_file = {toml_str(key)}")
        gpu = "nvidia-smi" if h is None or (gpu_every > 0 and i % gpu_every == 0) else "none"
        parts.append(f"""[[hosts]]
name = "{name}"
role = "train"
{how}

[hosts.gpu]
source = "{gpu}"
interval_s = {gpu_interval_s}
frames = {"true" if gpu_frames else "false"}

[hosts.training]
log_path = {toml_str(log_path)}
total_epochs = 1
steps_per_epoch = 1000
""")
    path.write_text("\n".join(parts))
    return path
