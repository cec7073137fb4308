"""Shared fixtures. The lab fixtures (real sshd hosts, systemctl, torchrun) live in tests/lab_fixtures.py."""
