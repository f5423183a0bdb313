"""NVTX test app: three layers inside torch.cuda.nvtx ranges ("model" / "decoder.layer.N"),
each a sigmoid then a multiply by N + 1 (a scalar the multiply kernel carries in its
arguments, so a capture shows which layer it came from); prints a checksum."""
import torch

torch.manual_seed(0)
x = torch.randn(1 << 20, device="cuda")
sums = []
with torch.cuda.nvtx.range("model"):
    for i in range(3):
        with torch.cuda.nvtx.range(f"decoder.layer.{i}"):
            y = torch.sigmoid(x) * float(i + 1)
            sums.append(y.double().sum().item())
torch.cuda.synchronize()
print("nvtx " + " ".join(f"{s:.3f}" for s in sums))
