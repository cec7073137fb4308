"""The console's config for a lab (``lab.toml``), and the parts of one that configs of other
shapes share (:func:`console_and_ssh`; strings through :func:`specconsole.lab.files.toml_str`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from specconsole.lab.files import toml_str, write_file
from specconsole.lab.parts import slurm_cluster

if TYPE_CHECKING:
    from specconsole.lab.parts.state import LabView


def write_config(lab: LabView) -> Path:
    """``lab.toml``: both hosts over SSH with the operator's key, their GPUs, the training log and
    its kill settings, SGLang's unit and URL."""
    o, s = lab.options, lab.state
    t = s.hosts["train"]
    key = lab.keys / "client_ed25519"
    text = f"""# specconsole config for the lab in {lab.dir} (written by `specconsole lab up`)
{console_and_ssh(lab, lab.dir / "audit.log", lab.dir / "console-state", connect_timeout_s=5)}
[[hosts]]
name = "train"
role = "train"
connect = "ssh"
host = {toml_str(t.address)}
port = {t.port}
user = "root"
identity_file = {toml_str(key)}

[hosts.gpu]
source = "nvidia-smi"
interval_s = {o.gpu_interval_s}

[hosts.training]
log_path = {toml_str(lab.train_log)}
total_epochs = {o.trainer_epochs}
steps_per_epoch = {o.trainer_steps_per_epoch}
stall_warning_min = 2

[hosts.training.kill]
pid_file = {toml_str(lab.trainer_pid_file)}
pattern = {toml_str(re.escape(f"specconsole.lab.doubles.trainer --log-path {lab.train_log}"))}
grace_s = 30
"""
    if o.slurm:  # issue 32: the training job is the lab cluster's Slurm job
        text += slurm_cluster.config_table(lab)
    text += _serving_host(lab, "serve", s.sglang_port)
    if s.router_port:
        text += _replicas(lab)
    write_file(lab.config_path, text)
    return lab.config_path


def _replicas(lab: LabView) -> str:
    """``--serve N``: replicas ``serve2`` .. ``serveN`` (``serve`` is above) and the ``[router]``
    in front of them all (a small gate: three coding tasks, 128 tokens each)."""
    s = lab.state
    text = f"""
[router]
url = "http://127.0.0.1:{s.router_port}"
drain_timeout_s = 30
gate_tasks = ["fizzbuzz", "binary_search", "lru_cache"]
gate_max_new_tokens = 128
"""
    for name, port in s.replica_ports.items():
        text += _serving_host(lab, name, port)
    return text


def _serving_host(lab: LabView, name: str, sglang_port: int) -> str:
    """One serving host's ``[[hosts]]`` table: SSH with the operator's key, its GPUs, its unit and URL."""
    o, h = lab.options, lab.state.hosts[name]
    return f"""
[[hosts]]
name = "{name}"
role = "serve"
connect = "ssh"
host = {toml_str(h.address)}
port = {h.port}
user = "root"
identity_file = {toml_str(lab.keys / "client_ed25519")}

[hosts.gpu]
source = "nvidia-smi"
interval_s = {o.gpu_interval_s}

[hosts.sglang]
unit = "sglang.service"
base_url = "http://127.0.0.1:{sglang_port}"
tunnel = {"true" if o.tunnel else "false"}
interval_s = {o.sglang_interval_s}
timeout_s = 3.0
draft_model_path = {toml_str(lab.draft_model_dir())}
"""


def console_and_ssh(lab: LabView, audit_log: Path, state_dir: Path, *, connect_timeout_s: float) -> str:
    """The ``[console]`` and ``[ssh]`` tables of a config for the lab's hosts (quick reconnects)."""
    return f"""[console]
refresh_s = 1.0
audit_log = {toml_str(audit_log)}
state_dir = {toml_str(state_dir)}

[ssh]
known_hosts = {toml_str(lab.keys / "known_hosts")}
keepalive_s = 5
connect_timeout_s = {connect_timeout_s:g}
backoff_initial_s = 0.5
backoff_max_s = 4
"""

