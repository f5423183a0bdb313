"""JAX test app: an XLA-fused elementwise computation; prints a checksum."""
import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import jax
import jax.numpy as jnp


@jax.jit
def f(x, y):
    return jnp.tanh(x * 1.5 + y) * y


x = jnp.arange(1 << 20, dtype=jnp.float32) / (1 << 20)
y = jnp.ones(1 << 20, dtype=jnp.float32) * 0.25
r = f(x, y).block_until_ready()
print(f"jax {float(jnp.sum(r.astype(jnp.float32))):.4f}")
