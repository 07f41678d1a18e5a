"""The suite runs on 4 CPU devices (set in conftest) so sharded code cannot silently degrade."""

import jax


def test_four_cpu_devices():
    assert len(jax.devices()) == 4


def test_x64_enabled():
    import jax.numpy as jnp

    assert jnp.asarray(1.0).dtype == jnp.float64
