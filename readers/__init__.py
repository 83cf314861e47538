"""Training side: PyTorch datasets over packed datasets (work in progress)."""
