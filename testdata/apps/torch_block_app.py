"""A small transformer block stack for `kreplay record --nvtx-range layer.N` (issue 32):
LAYERS pre-norm layers (layernorm, QKV projection, attention as matmul + softmax + matmul,
output projection, layernorm, MLP with GELU, residual adds), each inside
torch.cuda.nvtx.range(f"layer.{i}"), run ITERATIONS times, each on an input of its own
made before the first (so `--nth 2` is layer N of the second iteration, with every kernel
already loaded, and no kernel runs between the layers of an iteration).

fp32 throughout, TF32 off and deterministic algorithms on, fixed seeds: a run prints the same
checksums as any other, and the last line is the exact sum of the output's bits (int32 words
summed as int64), so two runs compare exactly.

    python3 torch_block_app.py [ITERATIONS]     (default 3)
"""

import os
import sys

# cuBLAS is deterministic only with a fixed workspace configuration, set before it starts.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402

LAYERS = 4
BATCH, SEQ, DIM, HEADS, HIDDEN = 4, 256, 768, 12, 3072


def make_layer(gen):
    """One layer's weights, scaled so activations stay of order one through the stack."""

    def w(*shape, scale):
        return (torch.randn(*shape, generator=gen, device="cuda") * scale).contiguous()

    return {
        "ln1": (torch.ones(DIM, device="cuda"), torch.zeros(DIM, device="cuda")),
        "qkv": (w(3 * DIM, DIM, scale=DIM ** -0.5), w(3 * DIM, scale=0.02)),
        "out": (w(DIM, DIM, scale=DIM ** -0.5), w(DIM, scale=0.02)),
        "ln2": (torch.ones(DIM, device="cuda"), torch.zeros(DIM, device="cuda")),
        "up": (w(HIDDEN, DIM, scale=DIM ** -0.5), w(HIDDEN, scale=0.02)),
        "down": (w(DIM, HIDDEN, scale=HIDDEN ** -0.5), w(DIM, scale=0.02)),
    }


def attention(x, p):
    b, s, d = x.shape
    hd = d // HEADS
    qkv = torch.nn.functional.linear(x, *p["qkv"])
    q, k, v = qkv.view(b, s, 3, HEADS, hd).permute(2, 0, 3, 1, 4).unbind(0)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (hd ** -0.5)
    probs = torch.softmax(scores, dim=-1)
    ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, d)
    return torch.nn.functional.linear(ctx, *p["out"])


def layer(x, p):
    x = x + attention(torch.nn.functional.layer_norm(x, (DIM,), *p["ln1"]), p)
    h = torch.nn.functional.layer_norm(x, (DIM,), *p["ln2"])
    h = torch.nn.functional.gelu(torch.nn.functional.linear(h, *p["up"]))
    return x + torch.nn.functional.linear(h, *p["down"])


def main():
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    layers = [make_layer(gen) for _ in range(LAYERS)]
    inputs = [torch.randn(BATCH, SEQ, DIM, generator=gen, device="cuda") for _ in range(iterations)]
    torch.cuda.synchronize()
    with torch.no_grad():
        for it in range(iterations):
            x = inputs[it]
            for i, p in enumerate(layers):
                with torch.cuda.nvtx.range(f"layer.{i}"):
                    x = layer(x, p)
            torch.cuda.synchronize()
            print(f"iteration {it}: sum {x.double().sum().item():.6f}")
    bits = x.contiguous().view(torch.int32).to(torch.int64).sum().item()
    print(f"torch block output bits {bits}")


if __name__ == "__main__":
    main()
