"""splitmix64: the seeded draws of every oracle script, the same on every Python version."""

MASK64 = 0xFFFFFFFFFFFFFFFF


def splitmix64(x):
    """The next state and output of splitmix64 from state x."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return x, z ^ (z >> 31)
