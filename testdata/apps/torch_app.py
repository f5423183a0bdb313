"""PyTorch test app: one cuBLAS GEMM and elementwise kernels; prints a checksum."""
import torch

torch.manual_seed(0)
a = torch.randn(2048, 2048, device="cuda")
b = torch.randn(2048, 2048, device="cuda")
c = a @ b
d = torch.sigmoid(c) * 0.5 + a
torch.cuda.synchronize()
print(f"torch {c.double().sum().item():.3f} {d.double().sum().item():.3f}")
