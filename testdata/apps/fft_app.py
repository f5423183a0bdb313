"""cuFFT test app: rfft of a non-power-of-two size runs cuFFT's regular_fft_factor, which
reads a lookup table through a pointer held in the module global `lut_sp`; prints a checksum."""
import torch

torch.manual_seed(0)
x = torch.randn(64, 3000, device="cuda")
y = torch.fft.rfft(x)
torch.cuda.synchronize()
print(f"fft {y.real.double().sum().item():.4f} {y.imag.double().abs().sum().item():.4f}")
