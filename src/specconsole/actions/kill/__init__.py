"""Stop a training job: a torchrun process tree, or a Slurm job."""
