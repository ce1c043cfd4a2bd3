"""Packaging: the wheel, the Dockerfile's steps, make install's torch, the CLI, server processes."""
