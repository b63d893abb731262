"""The builtin training-step workload: a few dozen steps of a small MLP on synthetic data.

Run as ``python .../nodewarden_agent/checks/tiny_train.py``; it prints one JSON line of figures on
stdout (the workload contract, see ``training``): ``samples_per_s``, ``loss``, ``steps``,
``seconds``, ``gpu`` (1 when it ran on CUDA). Without PyTorch it prints
``{"not_available": ...}`` and exits 0: a missing library is not a hardware failure.

The data and the weights come from a fixed seed, so the loss of a healthy node is the same
every run (on the same device kind): a NaN or a loss far off the usual says the arithmetic
is wrong, a low ``samples_per_s`` that the node is slow.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from typing import Any

FEATURES, HIDDEN, CLASSES = 64, 256, 10
SEED = 1234


def train(torch: Any, steps: int, batch_size: int) -> dict[str, float]:
    """Train for ``steps`` steps; figures over the timed steps (the first one warms up)."""
    torch.manual_seed(SEED)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    nn = torch.nn
    model = nn.Sequential(
        nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES)
    ).to(device)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    # Labels from a fixed random linear "teacher": a task the model can learn, so the loss falls.
    inputs = torch.randn(batch_size * 4, FEATURES, device=device)
    labels = (inputs @ torch.randn(FEATURES, CLASSES, device=device)).argmax(dim=1)
    loss_fn = nn.CrossEntropyLoss()

    def step(index: int) -> Any:
        start = (index % 4) * batch_size
        optimiser.zero_grad()
        loss = loss_fn(model(inputs[start : start + batch_size]), labels[start : start + batch_size])
        loss.backward()
        optimiser.step()
        return loss

    step(0)  # warm-up: kernel selection and allocation are not the node's speed
    if device.type == "cuda":
        torch.cuda.synchronize()
    began = time.perf_counter()
    for index in range(1, steps + 1):
        loss = step(index)
    final = float(loss.item())  # .item() waits for the device
    seconds = max(time.perf_counter() - began, 1e-9)
    return {
        "samples_per_s": round(steps * batch_size / seconds, 1),
        "loss": final,
        "steps": float(steps),
        "seconds": round(seconds, 4),
        "gpu": 1.0 if device.type == "cuda" else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    # A CPU-only PyTorch without NumPy warns on import; nothing here needs NumPy.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    try:
        import torch
    except ImportError as exc:
        print(json.dumps({"not_available": f"PyTorch is not installed on the node ({exc})"}))
        return 0
    figures = train(torch, args.steps, args.batch_size)
    print(f"tiny-train: torch {torch.__version__}, {args.steps} steps of {args.batch_size}", file=sys.stderr)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
