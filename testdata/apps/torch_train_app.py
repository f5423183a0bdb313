"""A PyTorch training step for `kreplay profile` (issue 12): an MLP forward and backward and an
SGD update, STEPS times (default 3), deterministic inputs. Prints the loss of each step and a
checksum of the weights: the same with and without kreplay. The loop's wall time goes to
stderr (the slowdown benchmark reads it).

    python3 torch_train_app.py [STEPS]
"""
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 2048),
    torch.nn.ReLU(),
    torch.nn.Linear(2048, 2048),
    torch.nn.ReLU(),
    torch.nn.Linear(2048, 512),
).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(512, 1024, device=dev)
y = torch.randn(512, 512, device=dev)
t0 = None
for step in range(steps):
    if step == 1:  # the loop's time leaves out the first step (cuBLAS set-up, lazy loading)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
    opt.zero_grad(set_to_none=False)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.9e}")
torch.cuda.synchronize()
# On stderr: stdout must read the same with and without kreplay.
if t0 is not None:
    print(f"train loop {time.perf_counter() - t0:.4f} s", file=sys.stderr)
total = sum(float(p.detach().double().sum()) for p in model.parameters())
print(f"weights checksum {total:.12e}")
