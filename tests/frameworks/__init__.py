"""Frameworks: real DDP, Lightning, Accelerate, transformers, HF datasets and wids runs
(their child scripts beside them)."""
