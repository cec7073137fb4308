"""Slurm: reading a job over a host's connection (:mod:`.query`), shared by the training source
(:mod:`specconsole.sources.slurm`) and the kill (:mod:`specconsole.actions.kill.slurm`), as
:mod:`specconsole.sglang` is for SGLang. The text formats themselves are :mod:`specconsole.formats.slurm`.
"""
