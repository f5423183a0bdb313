"""PyTorch under its own profiler (Kineto, a CUPTI user): kreplay must leave it unharmed."""
import sys
import torch
from torch.profiler import profile, ProfilerActivity

g = torch.Generator(device="cuda").manual_seed(3)
a = torch.randn(1 << 20, device="cuda", generator=g)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    b = torch.sigmoid(a) * 2.0
    torch.cuda.synchronize()
events = prof.key_averages()
# Diagnostics on stderr: what the profiler saw depends on who holds CUPTI.
print(f"torch_profiler_app: profiler saw {len(events)} event kinds", file=sys.stderr)
print(f"torch_profiler {b.double().sum().item():.4f}")
