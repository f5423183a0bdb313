"""cuFFT test app: rfft over several sizes (small single-kernel plans, a large multi-kernel
plan, odd factors). cuFFT's regular_fft_factor kernels read a lookup table through a pointer
held in the module global `lut_sp`. Prints a checksum."""
import torch

torch.manual_seed(0)
total = 0.0
for batch, n in ((64, 4096), (8, 1 << 20), (16, 15015), (4, 4099)):
    x = torch.randn(batch, n, device="cuda")
    y = torch.fft.rfft(x)
    total += y.abs().double().sum().item()
torch.cuda.synchronize()
print(f"fft {total:.3f}")
