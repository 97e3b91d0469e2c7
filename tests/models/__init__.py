"""Real models: the zoo, transformers models with default settings, the diffusers and torchvision
sweeps, dynamic shapes on transformers."""
