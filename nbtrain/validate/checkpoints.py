"""The checkpoint rung's load: a committed checkpoint's files match its manifest and each one deserialises."""

from __future__ import annotations

from pathlib import Path

from nbtrain.errors import NbtrainError

__all__ = ["CheckpointUnreadable", "load_checkpoint_files"]


class CheckpointUnreadable(NbtrainError):
    """A committed checkpoint that does not verify or whose files do not load (the job's fault)."""


def load_checkpoint_files(directory: Path) -> str:
    """Verify ``directory`` against its manifest, then load every tensor file on CPU; a summary of what loaded.

    ``.safetensors`` through safetensors, ``.bin``/``.pt``/``.pth``/``.pkl`` through ``torch.load`` (these are
    the job's own checkpoints, written by Accelerate's ``save_state``). Raises CheckpointUnreadable naming the
    file and the error.
    """
    from nbtrain.runtime.checkpoint import verify_checkpoint

    ok, why = verify_checkpoint(directory)
    if not ok:
        raise CheckpointUnreadable(f"checkpoint {directory} does not match its manifest: {why}")
    loaded = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        try:
            if path.suffix == ".safetensors":
                from safetensors.torch import load_file

                load_file(str(path), device="cpu")
            elif path.suffix in (".bin", ".pt", ".pth", ".pkl"):
                import torch

                torch.load(str(path), map_location="cpu", weights_only=False)
            else:
                continue
        except Exception as error:  # noqa: BLE001 - any failure to deserialise is the finding
            raise CheckpointUnreadable(f"checkpoint file {path} does not load: {type(error).__name__}: {error}") from None
        loaded.append(str(path.relative_to(directory)))
    if not loaded:
        raise CheckpointUnreadable(f"checkpoint {directory} has no model or optimizer files to load")
    return f"{len(loaded)} file(s) load: {', '.join(loaded)}"
